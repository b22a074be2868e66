"""The task policy: play a task's `solution/solve.sh` through the agent's own shell tool, with no GPU.

For each request it finds the task (the task whose instruction text appears in the conversation's user
messages; the longest such instruction wins), the agent's shell tool among the request's `tools` (Claude
Code's `Bash`, OpenCode's and Pi's `bash`, Codex's `exec_command`, Gemini CLI's and Qwen Code's `run_shell_command`:
a tool of one of those names, or shell, with a string `command` or `cmd` parameter),
and how many of the solution's steps the conversation already holds (its calls to that tool). It answers
with the next step as one tool call, or, once every step has run, ends the turn with a short message.

Steps (`shell_steps`): solve.sh's blank-line blocks, played as one bash running the file would (the
directory, variables, functions and options carry from step to step); the first also places the task's
solution/ files at /solution, as the oracle has them. When a step ends the
script (`exit`, a failure under `set -e`), its tool result says so and the turn ends there.
"""

from __future__ import annotations

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
            return Reply(text=f"Task {task.name}: no shell tool offered, so nothing to run.")
        if not task.steps:
            return Reply(text=f"Task {task.name} has no solution/solve.sh to play.")
        done = sum(
            1
            for m in messages
            if isinstance(m, dict) and m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
            if isinstance(call, dict) and (call.get("function") or {}).get("name") == tool.name
        )
        ended = _ended(messages, task.folder)
        if ended is not None:
            where, status = ended
            at = f"at step {done}" if where == "in" else f"before step {done}"
            return Reply(text=f"Stopped: the reference solution of {task.name} ended {at} (exit {status}).")
        if done >= len(task.steps):
            plural = "s" if len(task.steps) > 1 else ""
            return Reply(text=f"Done: ran the reference solution of {task.name} ({len(task.steps)} step{plural}).")
        step = without_substitution(task.steps[done]) if tool.name == _GEMINI_SHELL else task.steps[done]
        arguments: dict[str, Any] = {tool.command_key: step, **dict(tool.waits)}
        for field, kind in tool.required:
            if kind == "string":
                arguments[field] = f"Step {done + 1} of {len(task.steps)} of the reference solution"
            elif kind == "boolean":
                arguments[field] = False
        return Reply(text="", tool_calls=[(tool.name, arguments)])


def _ended(messages: list[Any], folder: str) -> tuple[str, str] | None:
    """What the last tool result says when the script has ended (`in` or `before` that step, the exit status)."""
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    if not results:
        return None
    found = [m for m in END_MARK.finditer(content_text(results[-1].get("content"))) if m[1] == folder]
    return (found[-1][2], found[-1][3]) if found else None
