"""Fixtures for task images: a Debian base on the engine, throwaway task dirs, and removal of what a test built."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from agentbake.buildkit.build import BuildResult

BOOKWORM = "debian:bookworm-slim"
TRIXIE = "debian:trixie-slim"


@pytest.fixture
def bases(built_images: dict[str, BuildResult]) -> tuple[str, str]:
    """The two Debian bases (the catalog images are built FROM them, so they are on the engine)."""
    return BOOKWORM, TRIXIE


@pytest.fixture
def cleanup(engine: docker.DockerClient) -> Iterator[list[str]]:
    """Image tags a test built: removed afterwards, newest first (a runnable image before its task image)."""
    tags: list[str] = []
    yield tags
    for tag in reversed(tags):
        with contextlib.suppress(docker.errors.DockerException):
            engine.images.remove(tag, force=True)


def unique(name: str) -> str:
    """A task name no other test (or earlier run) built an image for."""
    return f"{name}-{secrets.token_hex(3)}"


def write_task(
    root: Path,
    name: str,
    *,
    dockerfile: str | None = None,
    files: dict[str, str] | None = None,
    toml: str = "",
    test_sh: str = "exit 0\n",
    solve_sh: str | None = None,
) -> Path:
    """A task dir; `files` go into environment/ (the build context when there is a Dockerfile)."""
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Do the thing.\n")
    (task / "tests" / "test.sh").write_text(test_sh)
    if toml:
        (task / "task.toml").write_text(toml)
    env = task / "environment"
    if dockerfile is not None or files:
        env.mkdir()
    if dockerfile is not None:
        (env / "Dockerfile").write_text(dockerfile)
    for rel, text in (files or {}).items():
        (env / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / rel).write_text(text)
    if solve_sh is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(solve_sh)
    return task
