"""Helpers for the harness, rollout and CLI tests: throwaway Harbor tasks, leak checks and agent logs."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker

from agentbake.runner.docker import labels

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
EXAMPLE_TASKS = ("write-file", "fix-failing-test", "multi-step-report", "summarize-logs", "fix-inventory")
CATALOG_IMAGE_EXAMPLES = ("write-file", "fix-failing-test", "multi-step-report")
"""The examples that run in the agent's image (the others bring their own, which only Docker runs)."""


def write_task(
    root: Path,
    name: str,
    *,
    solve: str,
    test: str,
    instruction: str | None = None,
    setup: str | None = None,
    toml: str = "",
) -> Path:
    """A task directory `root/name` in Harbor's layout."""
    task = root / name
    (task / "solution").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text(instruction or f"Do the task {name}.\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + test)
    (task / "task.toml").write_text(toml)
    if setup is not None:
        (task / "environment").mkdir()
        (task / "environment" / "setup.sh").write_text("#!/bin/bash\n" + setup)
    return task


def reward_if(condition: str) -> str:
    """A test.sh body writing reward 1 to /logs/verifier/reward.txt when the shell `condition` holds, else 0."""
    return f"if {condition}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"


def copy_example(root: Path, example: str, name: str, *, solve: str | None = None) -> Path:
    """A copy of an example task under another name, optionally with another solve.sh."""
    task = root / name
    shutil.copytree(EXAMPLES / example, task)
    if solve is not None:
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    return task


def leftovers(engine: docker.DockerClient, prefix: str) -> list[str]:
    """Containers and gateway socket folders of rollouts whose id starts with `prefix`."""
    found = [
        c.name
        for c in engine.containers.list(all=True, filters={"label": labels.ROLLOUT}, ignore_removed=True)
        if c.labels.get(labels.ROLLOUT, "").startswith(prefix)
    ]
    found += [str(p) for p in Path(tempfile.gettempdir()).glob(f"agentbake-gw-{prefix}*")]
    return found


@contextmanager
def cpu_burners(count: int, seconds: float = 300) -> Iterator[None]:
    """`count` busy loops on the host (`sh -c 'while :; do :; done'`), the load of a training batch beside the
    sandboxes; ended on the way out, and by `timeout` after `seconds` whatever happens to this process."""
    burners = [
        subprocess.Popen(["timeout", "-s", "KILL", str(seconds), "sh", "-c", "while :; do :; done"])
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.terminate()  # timeout passes it on to its loop
        for burner in burners:
            burner.wait()


def with_deltas_joined(log: str) -> str:
    """`log` and, after it, the text of its JSON-line `message` events with `delta: true` joined: Gemini CLI
    streams the answer in such pieces."""
    pieces = []
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "message" and event.get("delta") is True:
            pieces.append(str(event.get("content", "")))
    return log + "\n" + "".join(pieces)
