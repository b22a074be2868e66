"""Requests shaped like each agent's, as they reach the model: tools, message forms and body keys.

Claude Code speaks Anthropic's Messages API and Codex OpenAI's Responses API, both reaching the model through
the gateway; OpenCode and Pi speak OpenAI chat completions directly (their shapes as observed on the wire:
OpenCode sends a string user message, `tool_choice: "auto"` and a bash tool whose `description` is required; Pi
sends the user message as text parts, `strict: false` tools, `store: false`, and `content: null` beside tool
calls; Codex sends developer messages, an `exec_command` function whose `cmd` is the command, and hosted tools).
Gemini CLI speaks Google's Gemini API through the gateway, Qwen Code chat completions; both name their shell tool
`run_shell_command`. mini-swe-agent (text-based) sends chat completions with no tools: its system prompt shows the
fenced block to answer in, its first user message the task and the submit command.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "https://json-schema.org/draft/2020-12/schema"

CLAUDE_TOOLS = [
    {
        "name": "Bash",
        "description": "Executes a given bash command and returns its output.",
        "input_schema": {
            "$schema": SCHEMA,
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to execute"},
                "timeout": {"type": "number", "description": "Optional timeout in milliseconds"},
                "description": {"type": "string", "description": "What this command does"},
                "run_in_background": {"type": "boolean"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {
        "name": "Write",
        "description": "Writes a file.",
        "input_schema": {
            "$schema": SCHEMA,
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["file_path", "content"],
            "additionalProperties": False,
        },
    },
]
CLAUDE_SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332"},
    {
        "type": "text",
        "text": "You are Claude Code. Working directory: /home/agent/workdir",
        "cache_control": {"type": "ephemeral"},
    },
]


def claude_user(instruction: str) -> dict[str, Any]:
    reminder = "<system-reminder>\nAs you answer, use the tools available.\n</system-reminder>"
    return {"role": "user", "content": [{"type": "text", "text": reminder}, {"type": "text", "text": instruction}]}


def _function(name: str, parameters: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": f"The {name} tool.", "parameters": parameters, **extra},
    }


OPENCODE_TOOLS = [
    _function(
        "bash",
        {
            "$schema": SCHEMA,
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout": {"type": "integer"},
                "workdir": {"type": "string"},
                "description": {"type": "string", "description": "Clear, concise description in 5-10 words"},
            },
            "required": ["command", "description"],
        },
    ),
    _function("read", {"$schema": SCHEMA, "type": "object", "properties": {"filePath": {"type": "string"}}}),
    _function("write", {"$schema": SCHEMA, "type": "object", "properties": {"content": {"type": "string"}}}),
]
PI_TOOLS = [
    _function(
        "read", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}, strict=False
    ),
    _function(
        "bash",
        {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
            "required": ["command"],
        },
        strict=False,
    ),
]


def opencode_body(instruction: str) -> dict[str, Any]:
    return {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are opencode. Working directory: /home/agent/workdir"},
            {"role": "user", "content": instruction},
        ],
        "tools": OPENCODE_TOOLS,
        "tool_choice": "auto",
        "max_tokens": 32000,
    }


def pi_body(instruction: str) -> dict[str, Any]:
    return {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You are an expert coding assistant."},
            {"role": "user", "content": [{"type": "text", "text": instruction}]},
        ],
        "tools": PI_TOOLS,
        "store": False,
        "max_completion_tokens": 16384,
    }


# Each OpenAI-dialect agent: its first request, and the assistant content it sends beside tool calls.
OPENAI_AGENTS = {"opencode": (opencode_body, ""), "pi": (pi_body, None)}


CODEX_TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {
                "cmd": {"type": "string", "description": "Shell command to execute."},
                "login": {"type": "boolean"},
                "workdir": {"type": "string"},
                "yield_time_ms": {"type": "number", "description": "Defaults to 10000 ms; range 250-30000 ms."},
            },
            "required": ["cmd"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "write_stdin",
        "description": "Writes characters to an existing unified exec session and returns recent output.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"chars": {"type": "string"}, "session_id": {"type": "number"}},
            "required": ["session_id"],
            "additionalProperties": False,
        },
    },
    {"type": "web_search", "external_web_access": True},
]


def codex_body(instruction: str) -> dict[str, Any]:
    return {
        "model": "test-model",
        "instructions": None,
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": instruction}]},
        ],
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }


SHELL_COMMAND_PARAMETERS = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "Exact bash command to execute as `bash -c <command>`"},
        "description": {"type": "string"},
        "dir_path": {"type": "string"},
        "is_background": {"type": "boolean"},
    },
    "required": ["command"],
}


def gemini_body(instruction: str) -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": instruction}]}],
        "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "read_file", "parametersJsonSchema": {"type": "object", "properties": {}}},
                    {"name": "run_shell_command", "parametersJsonSchema": SHELL_COMMAND_PARAMETERS},
                ]
            }
        ],
        "generationConfig": {"temperature": 1, "topP": 0.95, "topK": 64},
    }


def qwen_body(instruction: str) -> dict[str, Any]:
    properties = {
        **SHELL_COMMAND_PARAMETERS["properties"],
        "timeout": {"type": "integer", "minimum": 1, "maximum": 600000, "description": "Optional timeout in ms"},
    }
    return {
        "model": "test-model",
        "messages": [{"role": "system", "content": "You are Qwen Code."}, {"role": "user", "content": instruction}],
        "tools": [_function("run_shell_command", {**SHELL_COMMAND_PARAMETERS, "properties": properties})],
        "max_tokens": 8192,
    }


MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
MINI_ACTION = r"```mswea_bash_command\s*\n(.*?)\n```"
"""mini-swe-agent's text-based pattern: it takes an answer holding exactly one match, the match stripped."""


def mini_body(instruction: str, fence: str = "mswea_bash_command") -> dict[str, Any]:
    system = (
        "You are a helpful assistant that can interact with a computer.\n\n"
        "Your response must contain exactly ONE bash code block with ONE command.\n"
        f"<format_example>\nYour reasoning here.\n\n```{fence}\nyour_command_here\n```\n</format_example>\n"
    )
    user = (
        f"Please solve this issue: {instruction.strip()}\n\nYou can execute bash commands and edit files.\n"
        f"Submit your changes and finish your work by issuing the following command: `{MINI_SUBMIT}`.\n"
        f"```{fence}\nls -la\n```\n"
    )
    return {
        "model": "test-model",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }
