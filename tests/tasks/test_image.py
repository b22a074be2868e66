"""Task images on the real engine: environment/Dockerfile builds (content-addressed, cached, bounded by the
build timeout) and docker_image references (used, pulled, or the Dockerfile when the pull fails)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.builders import Progress
from agentbake.errors import TaskImageError
from agentbake.tasks.image import base_images, build_task_image, context_hash, pull_task_image, slug, task_image
from tests.tasks.conftest import BOOKWORM, unique, write_task

pytestmark = pytest.mark.docker


class Recorder(Progress):
    def __init__(self) -> None:
        self.steps: list[str] = []

    def step(self, index: int, total: int, instruction: str) -> None:
        self.steps.append(f"{index}/{total} {instruction}")


def test_base_images_are_the_from_and_copy_from_references_minus_stages() -> None:
    dockerfile = """
FROM ghcr.io/astral-sh/uv:0.9.5 AS uv
FROM --platform=linux/amd64 python:3.13-slim-bookworm
COPY --from=uv /uv /bin/
COPY --from=busybox:1.36 /bin/busybox /bin/
FROM scratch
"""
    assert base_images(dockerfile) == ["busybox:1.36", "ghcr.io/astral-sh/uv:0.9.5", "python:3.13-slim-bookworm"]
    assert slug("Chess_Best Move!") == "chess_best-move" and slug("...") == "task"


def test_context_hash_follows_content_exec_bits_bases_and_dockerignore(
    engine: docker.DockerClient, bases: tuple[str, str], tmp_path: Path
) -> None:
    root = write_task(tmp_path, "t", dockerfile=f"FROM {BOOKWORM}\nCOPY . /app\n", files={"a.sh": "echo a\n"})
    env = root / "environment"
    (env / ".dockerignore").write_text("ignored/\n")
    first = context_hash(engine, env)
    (env / "ignored").mkdir()
    (env / "ignored" / "big.bin").write_text("not sent to the engine")
    assert context_hash(engine, env) == first
    os.chmod(env / "a.sh", 0o755)
    executable = context_hash(engine, env)
    assert executable != first
    (env / "a.sh").write_text("echo b\n")
    assert context_hash(engine, env) not in (first, executable)
    (env / "Dockerfile").write_text(f"FROM {bases[1]}\nCOPY . /app\n")  # another base image, another hash
    other_base = context_hash(engine, env)
    (env / "Dockerfile").write_text("FROM agentbake-test/absent:1\nCOPY . /app\n")
    assert len({other_base, context_hash(engine, env)}) == 2


def test_dockerfile_builds_once_then_is_cached(
    engine: docker.DockerClient, bases: tuple[str, str], tmp_path: Path, cleanup: list[str]
) -> None:
    name = unique("build-once")
    dockerfile = f"FROM {BOOKWORM}\nWORKDIR /app\nCOPY setup.sh /app/\nRUN bash /app/setup.sh && rm /app/setup.sh\n"
    env = write_task(tmp_path, name, dockerfile=dockerfile, files={"setup.sh": "echo 42 > /app/answer\n"})
    env = env / "environment"
    recorder = Recorder()
    built = build_task_image(engine, name, env, timeout_s=300, progress=recorder)
    cleanup.append(built.ref)
    assert built.ref.startswith(f"agentbake-task/{name}:") and not built.cached and built.source == "dockerfile"
    assert any("RUN bash /app/setup.sh" in step for step in recorder.steps)
    out = engine.containers.run(built.ref, ["cat", "/app/answer"], remove=True, network_mode="none")
    assert out == b"42\n"
    again = build_task_image(engine, name, env, timeout_s=300, progress=Recorder())
    assert again.cached and (again.ref, again.id) == (built.ref, built.id)


def test_failing_dockerfile_names_the_task_and_step(
    engine: docker.DockerClient, bases: tuple[str, str], tmp_path: Path
) -> None:
    name = unique("fails")
    env = write_task(tmp_path, name, dockerfile=f"FROM {BOOKWORM}\nRUN echo boom >&2 && exit 3\n") / "environment"
    with pytest.raises(TaskImageError) as info:
        build_task_image(engine, name, env, timeout_s=300)
    message = str(info.value)
    assert f"task {name}" in message and str(env / "Dockerfile") in message and "step 2/2" in message


def test_missing_base_says_how_to_get_it(engine: docker.DockerClient, tmp_path: Path) -> None:
    name = unique("no-base")
    env = write_task(tmp_path, name, dockerfile="FROM agentbake-test/never-built:1\n") / "environment"
    with pytest.raises(TaskImageError, match=r"agentbake-test/never-built:1 is not on this engine: pull or load it"):
        build_task_image(engine, name, env, timeout_s=300)


def test_build_past_its_timeout_is_cancelled(
    engine: docker.DockerClient, bases: tuple[str, str], tmp_path: Path
) -> None:
    name = unique("slow")
    env = write_task(tmp_path, name, dockerfile=f"FROM {BOOKWORM}\nRUN sleep 60 # {name}\n") / "environment"
    with pytest.raises(TaskImageError, match=r"ran past its 2 s build timeout at step 2/2: RUN sleep 60"):
        build_task_image(engine, name, env, timeout_s=2)
    # The engine stops the step once it sees the build's request closed (a moment later).
    deadline = time.monotonic() + 15
    while running := [c for c in engine.containers.list() if name in " ".join(c.attrs["Config"]["Cmd"] or [])]:
        assert time.monotonic() < deadline, f"the cancelled build's step still runs: {running}"
        time.sleep(0.2)


def test_docker_image_used_when_present_else_a_clear_pull_error(
    engine: docker.DockerClient, bases: tuple[str, str]
) -> None:
    local = pull_task_image(engine, "t", BOOKWORM)
    assert local.cached and local.source == "docker_image" and local.ref == BOOKWORM
    absent = "agentbake-test/never-pushed:1"
    with pytest.raises(TaskImageError) as info:
        pull_task_image(engine, "my-task", absent, progress=Recorder())
    message = str(info.value)
    assert (
        "task my-task" in message
        and f"docker_image {absent!r} is not on this engine and could not be pulled" in message
    )


def test_docker_image_that_cannot_be_pulled_falls_back_to_the_dockerfile(
    engine: docker.DockerClient, bases: tuple[str, str], tmp_path: Path, cleanup: list[str]
) -> None:
    name = unique("both")
    env = write_task(tmp_path, name, dockerfile=f"FROM {BOOKWORM}\nRUN echo {name} > /built\n") / "environment"
    found = task_image(
        engine, name, environment_dir=env, docker_image="agentbake-test/never-pushed:1", build_timeout_s=300
    )
    cleanup.append(found.ref)
    assert found.source == "dockerfile" and found.ref.startswith("agentbake-task/")
    with pytest.raises(TaskImageError, match="could not be pulled"):
        task_image(
            engine, name, environment_dir=None, docker_image="agentbake-test/never-pushed:1", build_timeout_s=300
        )
