"""The runnable image: a task image made ready for agentbake's harness, the same for every agent.

    FROM <task image>
    runnable_prepare.sh as root: the harness's tools, the agent's user and its dirs
    ENTRYPOINT and CMD emptied (the relay is the main process); LABEL the harness's facts

The agent's user is the image's USER (root when it names none, as Harbor runs tasks) or the one a run names. Tagged
`agentbake-run/<task>:<hash12>` over the task image's id and this recipe, so it is built once per image and user.
The agent comes from the bundle mounted at run time (bundle.py). Images not for linux/amd64, musl images and images
without glibc's loader are refused before any build.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import posixpath
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from agentbake.buildkit.builders import Progress, run_build, seconds_since
from agentbake.buildkit.digest import length_prefixed
from agentbake.buildkit.engine import image_id
from agentbake.buildkit.labels import LABEL_PREFIX, ImageLabels
from agentbake.errors import BuildError, TaskImageError
from agentbake.tasks.bundle import BUNDLE_GIT, BUNDLE_PYTHON
from agentbake.tasks.image import TaskImage, slug

HASH_SCHEME = b"agentbake-runnable-v1"
TAG_REPOSITORY = "agentbake-run"
RECIPE_LABEL = "dev.agentbake.runnable.recipe"
"""On every runnable image: the recipe version it was built by (`agentbake prune` removes the others)."""
DEFAULT_WORKDIR = "/app"
"""The workdir when the task image names none (Harbor's tasks use /app)."""
BUILD_TIMEOUT_S = 600.0
_PREPARE = Path(__file__).with_name("runnable_prepare.sh")
_GLIBC_LOADER = "/lib64/ld-linux-x86-64.so.2"
_ROOT_ONLY_TREES = (
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/local/lib",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/run",
    "/var/lib",
    "/opt/agentbake",
)
_ROOT_ONLY_EXACT = ("/usr", "/usr/local", "/var", "/root", "/home", "/opt", "/tmp")


@dataclass(frozen=True)
class AgentUser:
    """Who the agent runs as in a task image: an entry of its /etc/passwd."""

    name: str
    uid: int
    gid: int
    home: str
    """Its home from /etc/passwd (root: /root), or /home/<name> when that is no real one or a system directory."""


@dataclass(frozen=True)
class RunnableImage:
    """A built (or found) runnable image."""

    tag: str
    id: str
    labels: dict[str, str]
    """The `dev.agentbake.*` facts the harness reads (user, home, python, dirs)."""
    cached: bool
    seconds: float


def choose_agent_user(passwd: str, wanted: str) -> AgentUser:
    """The passwd entry `wanted` names (a name or a uid; `root` and `0` always exist); TaskImageError when the
    image has none."""
    if wanted in ("root", "0"):
        return AgentUser("root", 0, 0, "/root")
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) < 7 or wanted not in (fields[0], fields[2]) or not (fields[2] + fields[3]).isdigit():
            continue
        home = posixpath.normpath(fields[5]) if fields[5].startswith("/") else ""
        if home in ("", "/", "/nonexistent") or unsafe_to_own(home):  # the agent gets dirs in it
            home = f"/home/{fields[0]}"
        return AgentUser(fields[0], int(fields[2]), int(fields[3]), home)
    raise TaskImageError(f"no user {wanted!r} in its /etc/passwd")


def unsafe_to_own(path: str) -> bool:
    """True for a directory a non-root agent must not own: a system directory, one under it, root's home, or one
    holding any of them (owning /etc means writing /etc/ld.so.preload)."""
    return path in _ROOT_ONLY_EXACT or any(
        path == top or path.startswith(top + "/") or top.startswith(path.rstrip("/") + "/") for top in _ROOT_ONLY_TREES
    )


def recipe_version() -> str:
    """What the runnable images this agentbake builds have in common: the hash scheme and the root step."""
    return hashlib.sha256(length_prefixed(HASH_SCHEME) + length_prefixed(_PREPARE.read_bytes())).hexdigest()[:12]


def runnable_labels(task: str, image: TaskImage, user: AgentUser, workdir: str) -> dict[str, str]:
    """The harness's facts as labels, and where the image came from."""
    facts = {
        "user": user.name,
        "uid": str(user.uid),
        "home": user.home,
        "python": BUNDLE_PYTHON,
        "git": BUNDLE_GIT,
        "dir_workdir": workdir,
        "dir_task": f"{user.home}/task",
        "dir_logs_agent": f"{user.home}/logs/agent",
        "dir_logs_verifier": f"{user.home}/logs/verifier",
    }
    source = {
        "task.name": task,
        "task.image": image.ref,
        "task.image-id": image.id,
        "runnable.recipe": recipe_version(),
    }
    return {
        **{ImageLabels.key(key): value for key, value in facts.items()},
        **{LABEL_PREFIX + k: v for k, v in source.items()},
    }


def dockerfile(image: TaskImage, user: AgentUser, workdir: str, original_user: str, labels: dict[str, str]) -> str:
    """The recipe: exec-form RUN, so the task's SHELL does not matter, and one LABEL step."""
    from agentbake.buildkit.render import dockerpairs  # here: rollouts in catalog images never load jinja2

    args = [str(user.uid), str(user.gid), user.home, workdir]
    return "\n".join(
        [
            f"FROM {image.id}",
            "USER root",
            "COPY runnable_prepare.sh /tmp/agentbake-prepare.sh",
            f"RUN {json.dumps(['/bin/sh', '/tmp/agentbake-prepare.sh', *args])}",
            f"WORKDIR {workdir}",
            "ENTRYPOINT []",
            "CMD []",
            f"USER {original_user or 'root'}",
            f"LABEL {dockerpairs(labels)}",
            "",
        ]
    )


def runnable_image(
    client: docker.DockerClient,
    task: str,
    image: TaskImage,
    *,
    user: str | None = None,
    user_source: str = "[agent] user",
    progress: Progress | None = None,
) -> RunnableImage:
    """The runnable image of `image` for the agent's `user` (None: the image's USER), built when missing. `user_source`
    names where the user came from, for errors."""
    started = time.monotonic()
    config = _check_platform(client, task, image)
    files = _read_files(client, image, ["/etc/passwd", "/etc/alpine-release", _GLIBC_LOADER])
    if "/etc/alpine-release" in files:
        raise TaskImageError(
            f"task {task}: image {image.ref} is Alpine (musl libc); agentbake's agents are glibc binaries: "
            "base the task on a glibc image (debian, ubuntu, python:3.x-slim)"
        )
    if _GLIBC_LOADER not in files:
        raise TaskImageError(
            f"task {task}: image {image.ref} has no glibc ({_GLIBC_LOADER} is missing); agentbake's agents are "
            "glibc binaries: base the task on a glibc image (debian, ubuntu, python:3.x-slim)"
        )
    original_user = (config.get("User") or "").strip()
    wanted = user or original_user.split(":")[0] or "root"
    try:
        agent = choose_agent_user(files.get("/etc/passwd", ""), wanted)
    except TaskImageError as exc:
        named = f"{user_source} {user!r}" if user else f"its USER {original_user!r}"
        raise TaskImageError(
            f"task {task}: image {image.ref}: {named}: {exc}; name a user the image has (or create it in the "
            "task's Dockerfile)"
        ) from None
    workdir = config.get("WorkingDir") or ""
    workdir = posixpath.normpath(workdir) if workdir not in ("", "/") else DEFAULT_WORKDIR
    labels = runnable_labels(task, image, agent, workdir)
    recipe = dockerfile(image, agent, workdir, original_user, labels)
    digest = hashlib.sha256(length_prefixed(HASH_SCHEME) + length_prefixed(recipe.encode()))
    digest.update(length_prefixed(_PREPARE.read_bytes()))
    tag = f"{TAG_REPOSITORY}/{slug(task)}:{digest.hexdigest()[:12]}"
    found = image_id(client, tag)
    if found is not None:
        return RunnableImage(tag, found, labels, True, seconds_since(started))
    from agentbake.buildkit.build import context_tar  # here, as dockerpairs above

    context = context_tar({"Dockerfile": recipe.encode(), _PREPARE.name: _PREPARE.read_bytes()})
    try:
        built = run_build(client, context, tag, progress=progress, timeout_s=BUILD_TIMEOUT_S)
    except BuildError as exc:
        # The recipe's own message (the legacy builder colours a step's stderr: take what follows the prefix).
        said = [
            line.split("agentbake: ", 1)[1].removesuffix("\x1b[0m") for line in exc.output_tail if "agentbake: " in line
        ]
        reason = said[-1] if said else str(exc)
        if "/bin/sh" in str(exc) and "no such file" in str(exc):
            reason = "it has no /bin/sh, which agentbake's harness needs"
        raise TaskImageError(f"task {task}: image {image.ref}: {reason}") from None
    return RunnableImage(tag, built, labels, False, seconds_since(started))


def _check_platform(client: docker.DockerClient, task: str, image: TaskImage) -> dict:
    attrs = client.api.inspect_image(image.id)
    platform = f"{attrs.get('Os') or 'linux'}/{attrs.get('Architecture') or 'amd64'}"
    if platform != "linux/amd64":
        raise TaskImageError(
            f"task {task}: image {image.ref} is for {platform}; agentbake runs linux/amd64 images only "
            "(build the task image for amd64)"
        )
    return attrs.get("Config") or {}


def _read_files(client: docker.DockerClient, image: TaskImage, paths: list[str]) -> dict[str, str]:
    """Those of `paths` that exist in the image (their text; a symlink's is empty), read from a created,
    never started container."""
    container = client.api.create_container(image.id, command=["/agentbake-never-runs"], entrypoint=[])
    found: dict[str, str] = {}
    try:
        for path in paths:
            try:
                chunks, _ = client.api.get_archive(container["Id"], path)
            except docker.errors.NotFound:
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
                member = archive.next()
                data = archive.extractfile(member) if member is not None and member.isfile() else None
                found[path] = data.read().decode(errors="replace") if data is not None else ""
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            client.api.remove_container(container["Id"], force=True)
    return found
