"""The task policy: play a task's `solution/solve.sh` through the agent's own shell tool, with no GPU.

For each request it finds the task whose instruction appears in the user messages and the agent's shell tool. It counts
the steps the conversation holds, then answers with the next step as one tool call, or ends the turn.

An agent with no tools gets each step as text in the fenced block its prompt shows (mini-swe-agent). The last block
holds the submit command the prompt names.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbake.errors import TaskError
from agentbake.scripted.script import Reply
from agentbake.scripted.shell_steps import END_MARK, solution_steps, state_folder, without_substitution
from agentbake.scripted.solution_files import read_solution_files
from agentbake.scripted.tokens import content_text
from agentbake.tasks import Task, load_tasks

_SPACE = re.compile(r"\s+")
_COMMAND_KEYS = ("command", "cmd")
_SHELL_NAMES = ("bash", "shell", "exec_command", "run_shell_command")
_GEMINI_SHELL = "run_shell_command"
"""Gemini CLI's shell tool (Qwen Code's too): Gemini CLI refuses a command holding a command substitution outside
single quotes, so such a step goes as `eval` of the step single-quoted."""
_WAITS = {"yield_time_ms": 30_000}
"""Optional numeric parameters set on every step: Codex's `exec_command` answers after `yield_time_ms` (10 s by
default, at most 30 s) with the command still running, and the next step must not start before it ends."""
_FENCES = ("mswea_bash_command", "bash")
"""Info strings of the fenced block a tool-less agent takes its command from, in order of preference: mini-swe-agent's
text-based mode's, and plain bash (its 1.x)."""
_SUBMIT = re.compile(r"`(echo [A-Z][A-Z0-9_]{7,})`")
"""The submit command a tool-less agent's prompt names, in backticks."""
_TIMEOUT = "timeout"
"""Set on every step to its schema's `maximum` when it declares one (Qwen Code's: 600000 ms, 2 minutes if unset);
without a maximum its unit is unknown (Pi's counts seconds) and it is left out."""


@dataclass(frozen=True)
class ScriptedTask:
    """A task as the policy plays it."""

    name: str
    instruction: str
    """The instruction with whitespace runs collapsed to one space, as matched against conversations."""
    steps: tuple[str, ...]
    """The shell commands, one tool call each; empty when the task has no solution/solve.sh."""
    folder: str
    """The steps' state folder under the agent's temp dir (`shell_steps.state_folder`), named in their messages."""


def load_scripted_tasks(tasks: Iterable[Task | str | Path]) -> list[ScriptedTask]:
    """Tasks given as loaded `Task`s, task directories or folders of task directories."""
    out = []
    for task in load_tasks(tasks):
        script = task.solution_script.read_text(encoding="utf-8") if task.solution_script else ""
        files = read_solution_files(task.solution_script.parent) if task.solution_script else None
        steps = tuple(solution_steps(script, files=files))
        if task.solution_script and not steps:
            raise TaskError(f"{task.solution_script}: holds no command; the scripted model plays solve.sh's commands")
        out.append(ScriptedTask(task.name, _normalize(task.instruction), steps, state_folder(script)))
    return out


def _normalize(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


@dataclass(frozen=True)
class ShellTool:
    name: str
    command_key: str
    required: tuple[tuple[str, str], ...]
    """(name, JSON type) of the other required parameters."""
    waits: tuple[tuple[str, int], ...] = ()
    """(name, value) of the optional parameters set on every step: those in `_WAITS` the tool has, and a `timeout`
    at its declared maximum."""


def find_shell_tool(tools: Any) -> ShellTool | None:
    """The agent's shell tool among OpenAI-style `tools`: named as in `_SHELL_NAMES`, with a string command."""
    candidates = []
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        name = function["name"]
        if name.lower() not in _SHELL_NAMES:
            continue
        schema = function.get("parameters") or {}
        properties = schema.get("properties") or {}
        key = next((k for k in _COMMAND_KEYS if (properties.get(k) or {}).get("type") == "string"), None)
        if key is None:
            continue
        required = tuple(
            (field, str((properties.get(field) or {}).get("type", "string")))
            for field in schema.get("required") or []
            if field != key
        )
        waits = tuple(
            (field, value)
            for field, value in _WAITS.items()
            if (properties.get(field) or {}).get("type") in ("number", "integer")
        )
        maximum = (properties.get(_TIMEOUT) or {}).get("maximum")
        if isinstance(maximum, int) and not isinstance(maximum, bool):
            waits += ((_TIMEOUT, maximum),)
        candidates.append(ShellTool(name, key, required, waits))
    return candidates[0] if candidates else None


class SolutionPolicy:
    """A responder (request -> Reply) that plays the matching task's solution; see the module docstring."""

    def __init__(self, tasks: Iterable[Task | str | Path]) -> None:
        self.tasks = load_scripted_tasks(tasks)
        if not self.tasks:
            raise TaskError("the scripted model got no task: pass task directories or folders of them")
        # Longest first: an instruction that contains another is the more specific match.
        self._by_length = sorted(self.tasks, key=lambda t: -len(t.instruction))

    def find_task(self, messages: list[Any]) -> ScriptedTask | None:
        said = _normalize(
            "\n".join(
                content_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user"
            )
        )
        return next((task for task in self._by_length if task.instruction in said), None)

    def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or []
        task = self.find_task(messages)
        if task is None:
            return Reply(text="No task I know is asked for here.")
        tool = find_shell_tool(request.get("tools"))
        if tool is None:
            fence = find_fence(messages)
            if fence is None:
                return Reply(text=f"Task {task.name}: no shell tool offered, so nothing to run.")
            return self._text_step(task, messages, fence)
        if not task.steps:
            return Reply(text=f"Task {task.name} has no solution/solve.sh to play.")
        done = sum(
            1
            for m in messages
            if isinstance(m, dict) and m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
            if isinstance(call, dict) and (call.get("function") or {}).get("name") == tool.name
        )
        closing = _closing(task, messages, done, "tool")
        if closing is not None:
            return Reply(text=closing)
        step = without_substitution(task.steps[done]) if tool.name == _GEMINI_SHELL else task.steps[done]
        arguments: dict[str, Any] = {tool.command_key: step, **dict(tool.waits)}
        for field, kind in tool.required:
            if kind == "string":
                arguments[field] = f"Step {done + 1} of {len(task.steps)} of the reference solution"
            elif kind == "boolean":
                arguments[field] = False
        return Reply(text="", tool_calls=[(tool.name, arguments)])

    def _text_step(self, task: ScriptedTask, messages: list[Any], fence: str) -> Reply:
        """The next step as text holding one block fenced with `fence`; at the end, the prompt's submit command."""
        if not task.steps:
            return Reply(text=f"Task {task.name} has no solution/solve.sh to play.")
        opening = f"```{fence}\n"
        done = sum(
            1
            for m in messages
            if isinstance(m, dict) and m.get("role") == "assistant" and opening in content_text(m.get("content"))
        )
        closing = _closing(task, messages, done, "user")
        if closing is not None:
            submit = _submit_command(messages)
            return Reply(text=closing if submit is None else f"{closing}\n\n{opening}{submit}\n```")
        step = task.steps[done]
        # The agent's pattern takes the block to the first line starting with ```: a step holding one goes encoded.
        if "\n```" in step:
            step = f"echo {base64.b64encode(step.encode()).decode()} | base64 -d | sh"
        return Reply(text=f"Step {done + 1} of {len(task.steps)} of the reference solution.\n\n{opening}{step}\n```")


def find_fence(messages: list[Any]) -> str | None:
    """The info string of the fenced block the system prompt shows the model to answer in (one of `_FENCES`)."""
    system = "\n".join(
        content_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "system"
    )
    return next((fence for fence in _FENCES if f"```{fence}\n" in system), None)


def _submit_command(messages: list[Any]) -> str | None:
    """The submit command the prompt (system messages and the first user message) names last: the agent's own rules
    follow the task's text."""
    prompt = [m for m in messages if isinstance(m, dict) and m.get("role") == "system"]
    prompt += [m for m in messages if isinstance(m, dict) and m.get("role") == "user"][:1]
    found = _SUBMIT.findall("\n".join(content_text(m.get("content")) for m in prompt))
    return found[-1] if found else None


def _closing(task: ScriptedTask, messages: list[Any], done: int, role: str) -> str | None:
    """The turn's closing text once the script has ended or every step has run, else None."""
    ended = _ended(messages, task.folder, role)
    if ended is not None:
        where, status = ended
        at = f"at step {done}" if where == "in" else f"before step {done}"
        return f"Stopped: the reference solution of {task.name} ended {at} (exit {status})."
    if done >= len(task.steps):
        plural = "s" if len(task.steps) > 1 else ""
        return f"Done: ran the reference solution of {task.name} ({len(task.steps)} step{plural})."
    return None


def _ended(messages: list[Any], folder: str, role: str) -> tuple[str, str] | None:
    """What the last result (a message of `role`) says when the script has ended (`in` or `before` that step, the
    exit status)."""
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == role]
    if not results:
        return None
    found = [m for m in END_MARK.finditer(content_text(results[-1].get("content"))) if m[1] == folder]
    return (found[-1][2], found[-1][3]) if found else None
