"""The task policy: agents' requests (after the gateway for Claude Code) play solve.sh step by step."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from agentbake.errors import TaskError
from agentbake.gateway import GatewayConfig, create_app
from agentbake.scripted import ScriptedModel, SolutionPolicy, solution_steps, start_scripted_model
from agentbake.scripted.shell_steps import without_substitution
from agentbake.serve import serve_in_thread
from agentbake.tasks import load_task
from tests.scripted.agent_requests import (
    CLAUDE_SYSTEM,
    CLAUDE_TOOLS,
    MINI_ACTION,
    MINI_SUBMIT,
    OPENAI_AGENTS,
    claude_user,
    codex_body,
    gemini_body,
    mini_body,
    qwen_body,
)

MULTI_STEP = """#!/bin/bash
set -e
mkdir -p sub
cd sub
echo one > one.txt

# the second step goes on where the first left off: in sub/
echo two > two.txt

cat > three.txt <<'EOF'
a

b
EOF
"""
INSTRUCTION = "Create one.txt, two.txt and three.txt in sub/.\n"
FINAL = "Done: ran the reference solution of multi (3 steps)."


# ------------------------------------------------------------------ solve.sh -> steps


def test_a_script_without_blank_lines_is_one_step():
    (step,) = solution_steps("#!/bin/bash\necho a > a.txt\necho b >> a.txt\n")
    assert "\necho a > a.txt\necho b >> a.txt\n" in step and step.endswith('\nbash "$S/run" 1 1')


def test_steps_run_in_one_persistent_shell_do_what_solve_sh_does(tmp_path: Path):
    """As in a shell tool that keeps its shell between calls: the steps never change its directory."""
    steps = solution_steps(MULTI_STEP)
    assert len(steps) == 3
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    subprocess.run(["bash", "-c", "\n".join(steps)], cwd=tmp_path, env=env, check=True, text=True)
    assert (tmp_path / "sub" / "one.txt").read_text() == "one\n"
    assert (tmp_path / "sub" / "two.txt").read_text() == "two\n"
    assert (tmp_path / "sub" / "three.txt").read_text() == "a\n\nb\n"


def test_bad_tasks_are_refused_with_the_path(make_task, tmp_path: Path):
    with pytest.raises(TaskError, match=r"instruction\.md"):
        SolutionPolicy([tmp_path])
    empty = make_task("empty", "do it", "#!/bin/bash\n# nothing\n")
    with pytest.raises(TaskError, match=r"empty/solution/solve.sh: holds no command"):
        SolutionPolicy([empty])


# ------------------------------------------------------------------ placing a request


def _body(instruction: str, **overrides: Any) -> dict[str, Any]:
    return {**OPENAI_AGENTS["pi"][0](instruction), **overrides}


def test_the_longest_matching_instruction_wins_and_whitespace_runs_count_as_one(make_task):
    short = make_task("short", "Fix the bug.", "echo short\n")
    long = make_task("long", "Fix the bug.\nThen   write a test.", "echo long\n")
    policy = SolutionPolicy([short, long])
    assert policy(_body("Please:\n\nFix the bug. Then write\na test.")).tool_calls[0][1] == {
        "command": solution_steps("echo long\n")[0]
    }
    assert policy(_body("Fix the bug.")).tool_calls[0][1] == {"command": solution_steps("echo short\n")[0]}


def test_requests_it_cannot_place_get_a_short_text(make_task):
    policy = SolutionPolicy([make_task("t", "Make x.", "touch x\n"), make_task("nosolve", "Say hi.", None)])
    replies = [
        policy(_body("Something else entirely.")),
        policy(_body("Make x.", tools=[])),  # a title call: no tools
        policy({"model": "m", "messages": [{"role": "user", "content": "Make x."}]}),
        policy(_body("Say hi.")),
    ]
    assert [r.tool_calls for r in replies] == [[]] * 4
    assert len({r.text for r in replies}) == 3 and all(0 < len(r.text) < 80 for r in replies)


def test_scripted_model_takes_loaded_tasks_and_folders(make_task, tmp_path: Path):
    one = make_task("one", "First.", "echo 1\n")
    make_task("two", "Second.", "echo 2\n")
    assert [t.name for t in ScriptedModel(tasks=[tmp_path / "tasks"]).tasks] == ["one", "two"]
    assert [t.name for t in ScriptedModel(tasks=[load_task(one)]).tasks] == ["one"]
    assert ScriptedModel().tasks == []


# ------------------------------------------------------------------ whole conversations, per agent


@pytest.fixture
def task_model(make_task) -> Iterator[str]:
    """The scripted model playing the multi-step task (through the runner's API); yields its URL."""
    with start_scripted_model([make_task("multi", INSTRUCTION, MULTI_STEP)]) as served:
        yield served.url


def _openai_turn(client: openai.OpenAI, body: dict[str, Any], stream: bool) -> tuple[str, list[dict]]:
    """(text, tool calls) of one call, streamed or not."""
    if not stream:
        message = client.chat.completions.create(**body).choices[0].message
        return message.content or "", [c.model_dump() for c in message.tool_calls or []]
    text, calls = "", {}
    for chunk in client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True}):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(
                call.index, {"id": call.id, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            entry["function"]["name"] += call.function.name or ""
            entry["function"]["arguments"] += call.function.arguments or ""
    return text, list(calls.values())


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
@pytest.mark.parametrize("agent", sorted(OPENAI_AGENTS))
def test_openai_agents_get_each_step_as_a_bash_call_then_a_final_text(task_model: str, agent: str, stream: bool):
    make_body, content_beside_calls = OPENAI_AGENTS[agent]
    body = make_body(INSTRUCTION)
    client = openai.OpenAI(base_url=task_model + "/v1", api_key="unused", max_retries=0)
    commands = []
    for _ in range(10):
        text, calls = _openai_turn(client, body, stream)
        if not calls:
            break
        (call,) = calls
        arguments = json.loads(call["function"]["arguments"])
        assert call["function"]["name"] == "bash" and call["id"].startswith("chatcmpl-tool-")
        if agent == "opencode":  # its required description is filled in
            assert arguments.pop("description") == f"Step {len(commands) + 1} of 3 of the reference solution"
        assert list(arguments) == ["command"]
        commands.append(arguments["command"])
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": content_beside_calls, "tool_calls": calls},
            {"role": "tool", "tool_call_id": call["id"], "content": "(no output)"},
        ]
    assert commands == solution_steps(MULTI_STEP)
    assert text == FINAL


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_claude_code_through_the_gateway_gets_each_step_as_a_bash_tool_use(
    task_model: str, tmp_path: Path, stream: bool
):
    config = GatewayConfig(upstream=task_model + "/v1", trace=tmp_path / "trace.jsonl")
    request = {"model": "claude-sonnet-4-5", "max_tokens": 8192, "system": CLAUDE_SYSTEM, "tools": CLAUDE_TOOLS}
    messages: list[dict[str, Any]] = [claude_user(INSTRUCTION)]
    commands = []
    with serve_in_thread(create_app(config), log_level="critical") as gateway:
        client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
        for _ in range(10):
            if stream:
                with client.messages.stream(**request, messages=messages) as events:
                    message = events.get_final_message()
            else:
                message = client.messages.create(**request, messages=messages)
            if message.stop_reason != "tool_use":
                break
            (use,) = [b for b in message.content if b.type == "tool_use"]
            assert use.name == "Bash" and list(use.input) == ["command"]
            commands.append(use.input["command"])
            result = {"type": "tool_result", "tool_use_id": use.id, "content": "", "is_error": False}
            messages += [
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                {"role": "user", "content": [result]},
            ]
    assert commands == solution_steps(MULTI_STEP)
    assert message.stop_reason == "end_turn" and [b.type for b in message.content] == ["text"]
    assert message.content[0].text == FINAL


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_codex_through_the_gateway_gets_each_step_as_an_exec_command_call(
    task_model: str, tmp_path: Path, stream: bool
):
    """Codex's shell tool is `exec_command` (string `cmd`); each step waits the longest Codex allows for its end."""
    config = GatewayConfig(upstream=task_model + "/v1", trace=tmp_path / "trace.jsonl")
    body = codex_body(INSTRUCTION)
    commands = []
    with serve_in_thread(create_app(config), log_level="critical") as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
        for _ in range(10):
            if stream:
                (response,) = [
                    e.response for e in client.responses.create(**body, stream=True) if e.type == "response.completed"
                ]
            else:
                response = client.responses.create(**body)
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                break
            (call,) = calls
            arguments = json.loads(call.arguments)
            assert (
                call.name == "exec_command" and arguments.pop("yield_time_ms") == 30_000 and list(arguments) == ["cmd"]
            )
            commands.append(arguments["cmd"])
            output = {"type": "function_call_output", "call_id": call.call_id, "output": "Process exited with code 0"}
            body["input"] = [*body["input"], call.model_dump(exclude_none=True), output]
    assert commands == solution_steps(MULTI_STEP)
    assert response.output_text == FINAL


def test_gemini_cli_through_the_gateway_gets_each_step_with_no_substitution_outside_quotes(
    task_model: str, tmp_path: Path
):
    """Gemini CLI refuses a command holding `$(`, a backtick, `<(` or `>(` outside single quotes, here-documents
    included: such a step goes as `eval` of it single-quoted, which plays the same."""
    config = GatewayConfig(upstream=task_model + "/v1", trace=tmp_path / "trace.jsonl")
    body = gemini_body(INSTRUCTION)
    commands = []
    with serve_in_thread(create_app(config), log_level="critical") as gateway:
        for _ in range(10):
            answer = httpx.post(f"{gateway.url}/v1beta/models/test-model:generateContent", json=body).json()
            content = answer["candidates"][0]["content"]
            calls = [part["functionCall"] for part in content["parts"] if "functionCall" in part]
            if not calls:
                break
            (call,) = calls
            assert call["name"] == "run_shell_command" and list(call["args"]) == ["command"]
            commands.append(call["args"]["command"])
            response = {"id": call["id"], "name": call["name"], "response": {"output": "(no output)"}}
            body["contents"] = [*body["contents"], content, {"role": "user", "parts": [{"functionResponse": response}]}]
    steps = solution_steps(MULTI_STEP)
    assert commands == [without_substitution(step) for step in steps] and commands != steps
    assert commands[0].startswith("eval '") and all(without_substitution(c) == c for c in commands)
    assert content["parts"][0]["text"] == FINAL
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    for command in commands:  # a fresh `bash -c` per call, as Gemini CLI runs them
        subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, check=True, text=True)
    assert (tmp_path / "sub" / "three.txt").read_text() == "a\n\nb\n"


def test_qwen_code_gets_each_step_as_a_run_shell_command_call(task_model: str):
    """Qwen Code's shell tool has Gemini CLI's name: its steps go the same way, each with the longest timeout the
    tool declares (else 2 minutes end a step)."""
    client = openai.OpenAI(base_url=task_model + "/v1", api_key="unused", max_retries=0)
    body = qwen_body(INSTRUCTION)
    commands = []
    for _ in range(10):
        text, calls = _openai_turn(client, body, stream=True)
        if not calls:
            break
        (call,) = calls
        arguments = json.loads(call["function"]["arguments"])
        assert call["function"]["name"] == "run_shell_command" and arguments.pop("timeout") == 600_000
        assert list(arguments) == ["command"]
        commands.append(arguments["command"])
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": call["id"], "content": "(no output)"},
        ]
    assert commands == [without_substitution(step) for step in solution_steps(MULTI_STEP)]
    assert text == FINAL


def test_a_title_call_gets_plain_text(task_model: str):
    """OpenCode's title call: the instruction, no tools."""
    body = OPENAI_AGENTS["opencode"][0](INSTRUCTION)
    del body["tools"], body["tool_choice"]
    client = openai.OpenAI(base_url=task_model + "/v1", api_key="unused", max_retries=0)
    message = client.chat.completions.create(**body).choices[0].message
    assert message.tool_calls is None and message.content == "Task multi: no shell tool offered, so nothing to run."


def _mini_conversation(client: openai.OpenAI, body: dict[str, Any], stream: bool) -> list[str]:
    """The commands mini-swe-agent takes from the answers (its own pattern), each observed with an empty output,
    until an answer holds its submit command."""
    commands = []
    for _ in range(10):
        text, calls = _openai_turn(client, body, stream)
        assert calls == []
        (command,) = (match.strip() for match in re.findall(MINI_ACTION, text, re.DOTALL))
        commands.append(command)
        if command == MINI_SUBMIT:
            break
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": text},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
        ]
    return commands


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_mini_swe_agent_gets_each_step_in_one_fenced_block_then_its_submit_command(
    task_model: str, tmp_path: Path, stream: bool
):
    """No tools: each step is the one block of its answer, then the block holds the submit command the prompt names;
    the commands, run by `sh -c` as mini-swe-agent runs them, do what solve.sh does."""
    client = openai.OpenAI(base_url=task_model + "/v1", api_key="unused", max_retries=0)
    commands = _mini_conversation(client, mini_body(INSTRUCTION), stream)
    assert commands == [*solution_steps(MULTI_STEP), MINI_SUBMIT]
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    for command in commands[:-1]:
        subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, check=True, text=True)
    assert (tmp_path / "sub" / "three.txt").read_text() == "a\n\nb\n"


def test_a_plain_bash_fence_is_answered_in_kind(make_task):
    """mini-swe-agent 1.x shows ```bash: the steps come in that fence."""
    policy = SolutionPolicy([make_task("t", "Make x.", "touch x\n")])
    reply = policy(mini_body("Make x.", fence="bash"))
    (step,) = solution_steps("touch x\n")
    assert reply.tool_calls == [] and reply.text.endswith(f"```bash\n{step}\n```")


def test_a_step_ending_the_script_ends_with_the_submit_command(make_task, tmp_path: Path):
    solve = "#!/bin/bash\nset -e\nfalse\n\necho never > never.txt\n"
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    policy = SolutionPolicy([make_task("fails", INSTRUCTION, solve)])
    body = mini_body(INSTRUCTION)
    (first,) = re.findall(MINI_ACTION, policy(body).text, re.DOTALL)
    result = subprocess.run(["sh", "-c", first], cwd=tmp_path, env=env, text=True, capture_output=True)
    body["messages"] += [
        {"role": "assistant", "content": policy(body).text},
        {"role": "user", "content": f"<returncode>1</returncode>\n<output>\n{result.stderr}</output>"},
    ]
    reply = policy(body).text
    assert reply.startswith("Stopped: the reference solution of fails ended at step 1 (exit 1).")
    assert re.findall(MINI_ACTION, reply, re.DOTALL) == [MINI_SUBMIT]


def test_a_step_holding_a_fence_line_goes_encoded_and_plays_the_same(make_task, tmp_path: Path):
    """mini-swe-agent's pattern ends the block at the first line starting with ```: such a step goes as base64."""
    solve = "cat > notes.md <<'EOF'\n```python\nprint(1)\n```\nEOF\n"
    policy = SolutionPolicy([make_task("notes", "Write notes.", solve)])
    (command,) = re.findall(MINI_ACTION, policy(mini_body("Write notes.")).text, re.DOTALL)
    assert "```" not in command and command.endswith("| base64 -d | sh")
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, check=True, text=True)
    assert (tmp_path / "notes.md").read_text() == "```python\nprint(1)\n```\n"
