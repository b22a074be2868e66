"""A task's own image: built from its `environment/Dockerfile`, or its `[environment] docker_image`.

The tag `agentbake-task/<task>:<hash12>` hashes the build context and its base images' ids, so an unchanged task is
never rebuilt. A `docker_image` is used as it is, pulled when missing. With both, as Harbor does, the prebuilt image
wins; the Dockerfile is the fallback when it cannot be had, so tasks run offline.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import docker
import docker.errors
from docker.utils.build import exclude_paths, tar

from agentbake.buildkit.builders import Progress, run_build, seconds_since
from agentbake.buildkit.digest import length_prefixed
from agentbake.buildkit.engine import image_id
from agentbake.errors import BuildError, TaskImageError

HASH_SCHEME = b"agentbake-task-image-v1"
TAG_REPOSITORY = "agentbake-task"
DOCKERFILE = "Dockerfile"
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE | re.MULTILINE)
_COPY_FROM = re.compile(r"^\s*COPY\s+.*--from=(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class TaskImage:
    """The image a task's sandboxes start from, before agentbake's runnable layer."""

    ref: str
    """`agentbake-task/<task>:<hash12>` for a built Dockerfile, else the task's `docker_image`."""
    id: str
    source: Literal["dockerfile", "docker_image"]
    cached: bool
    """True when nothing was built or pulled."""
    seconds: float


def slug(name: str) -> str:
    """A task name as a Docker repository path component: lowercase, [a-z0-9._-], starting alphanumeric."""
    text = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("._-")
    return text[:100] or "task"


def context_files(environment_dir: Path) -> list[str]:
    """The build context's paths (relative, sorted), as the engine gets them: `.dockerignore` applied."""
    return sorted(exclude_paths(str(environment_dir), _patterns(environment_dir), dockerfile=DOCKERFILE))


def context_hash(client: docker.DockerClient, environment_dir: Path) -> str:
    """sha256 over the build context and the local ids of the images the Dockerfile builds from."""
    digest = hashlib.sha256(length_prefixed(HASH_SCHEME))
    for rel in context_files(environment_dir):
        path = environment_dir / rel
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            kind, data = b"link", os.readlink(path).encode()
        elif stat.S_ISDIR(info.st_mode):
            kind, data = b"dir", b""
        else:
            kind, data = (b"exec" if info.st_mode & 0o111 else b"file"), path.read_bytes()
        digest.update(length_prefixed(rel.encode()) + length_prefixed(kind) + length_prefixed(data))
    for ref in base_images((environment_dir / DOCKERFILE).read_text(encoding="utf-8")):
        digest.update(length_prefixed(ref.encode()) + length_prefixed((image_id(client, ref) or "absent").encode()))
    return digest.hexdigest()


def base_images(dockerfile: str) -> list[str]:
    """Images a Dockerfile needs from the engine: FROM and COPY --from references, minus its own stages."""
    stages = {m.lower() for m in re.findall(r"^\s*FROM\s+.*\s+AS\s+(\S+)", dockerfile, re.IGNORECASE | re.MULTILINE)}
    refs = [*_FROM.findall(dockerfile), *_COPY_FROM.findall(dockerfile)]
    return sorted({ref for ref in refs if ref.lower() not in stages and not ref.isdigit() and ref != "scratch"})


def build_task_image(
    client: docker.DockerClient,
    task: str,
    environment_dir: Path,
    *,
    timeout_s: float,
    progress: Progress | None = None,
) -> TaskImage:
    """`environment/Dockerfile` built with environment/ as the context; skipped when its tag exists."""
    started = time.monotonic()
    tag = f"{TAG_REPOSITORY}/{slug(task)}:{context_hash(client, environment_dir)[:12]}"
    found = image_id(client, tag)
    if found is not None:
        return TaskImage(tag, found, "dockerfile", True, seconds_since(started))
    missing = [ref for ref in base_images((environment_dir / DOCKERFILE).read_text()) if image_id(client, ref) is None]
    context = tar(str(environment_dir), exclude=_patterns(environment_dir), dockerfile=(DOCKERFILE, None)).read()
    try:
        built = run_build(client, context, tag, progress=progress, timeout_s=timeout_s)
    except BuildError as exc:
        hint = ""
        if missing:
            hint = (
                f"; {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on this engine: pull or load "
                "it (`docker load`), or for Debian build one offline (`agentbake base debian --suite bookworm`)"
            )
        raise TaskImageError(f"task {task}: {environment_dir / DOCKERFILE}: {exc}{hint}") from None
    return TaskImage(tag, built, "dockerfile", False, seconds_since(started))


def pull_task_image(client: docker.DockerClient, task: str, ref: str, *, progress: Progress | None = None) -> TaskImage:
    """The task's `docker_image`: the local one, else pulled; TaskImageError when neither works."""
    started = time.monotonic()
    found = image_id(client, ref)
    if found is not None:
        return TaskImage(ref, found, "docker_image", True, seconds_since(started))
    (progress or Progress()).step(1, 1, f"pull {ref}")
    try:
        pulled = client.images.pull(ref).id
    except docker.errors.DockerException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TaskImageError(
            f"task {task}: [environment] docker_image {ref!r} is not on this engine and could not be pulled "
            f"({first}); pull or load it (`docker load`), or give the task an environment/Dockerfile"
        ) from None
    return TaskImage(ref, pulled, "docker_image", False, seconds_since(started))


def task_image(
    client: docker.DockerClient,
    task: str,
    *,
    environment_dir: Path | None,
    docker_image: str | None,
    build_timeout_s: float,
    progress: Progress | None = None,
) -> TaskImage:
    """The docker_image when there is one and the engine has it or can pull it, else the Dockerfile built."""
    has_dockerfile = environment_dir is not None and (environment_dir / DOCKERFILE).is_file()
    if docker_image:
        try:
            return pull_task_image(client, task, docker_image, progress=progress)
        except TaskImageError:
            if not has_dockerfile:
                raise
    if not has_dockerfile or environment_dir is None:
        raise TaskImageError(f"task {task}: neither [environment] docker_image nor environment/Dockerfile")
    return build_task_image(client, task, environment_dir, timeout_s=build_timeout_s, progress=progress)


def _patterns(environment_dir: Path) -> list[str]:
    """`.dockerignore`'s patterns (a new list each call: docker-py appends to it)."""
    ignore = environment_dir / ".dockerignore"
    if not ignore.is_file():
        return []
    lines = (line.strip() for line in ignore.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]
