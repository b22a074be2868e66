"""The runnable image: a task image made ready for agentbake's harness, the same for every agent.

    FROM <task image>
    runnable_prepare.sh as root: the tools the harness runs are there; the agent's user (the passwd
        entry at uid 1000 when the image has one, e.g. `ubuntu` on ubuntu:24.04; else `agent`, uid 1000,
        HOME /home/agent); its home, log and task dirs; the task's WORKDIR (usually /app, root-owned;
        /app when the image names none) owned by it, so the agent can work there
    ENTRYPOINT and CMD emptied (the sandbox's main process is agentbake's relay); LABEL the harness's facts

Tagged `agentbake-run/<task>:<hash12>` over the task image's id and this recipe, so it is built once
per task image (about a second: one small layer). The agent itself is not in it: it comes from the
agent bundle mounted at run time (bundle.py), so one runnable image serves claude-code, opencode and pi.

Refused with a TaskImageError naming the task, before any build: images not for linux/amd64, musl
(Alpine) images and images without glibc's loader (the agents are glibc binaries).
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

from agentbake.buildkit.builders import Progress, run_build
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
AGENT_UID = 1000
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
    """Who the agent runs as in a task image."""

    name: str
    uid: int
    gid: int
    home: str
    create: bool
    """True when the image has no user at uid 1000 and the recipe adds one."""


@dataclass(frozen=True)
class RunnableImage:
    """A built (or found) runnable image."""

    tag: str
    id: str
    labels: dict[str, str]
    """The `dev.agentbake.*` facts the harness reads (user, home, python, dirs)."""
    cached: bool
    seconds: float


def choose_agent_user(passwd: str) -> AgentUser:
    """The image's user at uid 1000 (its home, or /home/<name> when that is no real one or one the agent must
    not own), else a new `agent` (or `agentbake` when an `agent` with another uid exists) with group 1000."""
    names = set()
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) < 7:
            continue
        names.add(fields[0])
        if fields[2] == str(AGENT_UID) and fields[3].isdigit():
            home = fields[5] if fields[5].startswith("/") and fields[5] != "/nonexistent" else ""
            home = "" if home in ("", "/") or unsafe_workdir(posixpath.normpath(home)) else home  # it gets chowned
            return AgentUser(fields[0], AGENT_UID, int(fields[3]), home or f"/home/{fields[0]}", create=False)
    name = "agent" if "agent" not in names else "agentbake"
    if name in names:
        raise TaskImageError(f"users named agent and agentbake exist, but none at uid {AGENT_UID}")
    return AgentUser(name, AGENT_UID, AGENT_UID, f"/home/{name}", create=True)


def unsafe_workdir(workdir: str) -> bool:
    """True for a workdir the agent must not own: a system directory, one under it, root's home, or one
    holding any of them (owning /etc lets the agent write /etc/ld.so.preload, which every root process reads)."""
    return workdir in _ROOT_ONLY_EXACT or any(
        workdir == top or workdir.startswith(top + "/") or top.startswith(workdir.rstrip("/") + "/")
        for top in _ROOT_ONLY_TREES
    )


def recipe_version() -> str:
    """What the runnable images this agentbake builds have in common: the hash scheme and the root step."""
    return hashlib.sha256(length_prefixed(HASH_SCHEME) + length_prefixed(_PREPARE.read_bytes())).hexdigest()[:12]


def runnable_labels(task: str, image: TaskImage, user: AgentUser, workdir: str) -> dict[str, str]:
    """The harness's facts (ImageLabels' spelling; the agent's own labels come from its catalog image at run
    time) and where the image came from."""
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
    """The recipe; exec-form RUN, so a task's SHELL does not matter; one LABEL step (the legacy builder makes
    a step of each label passed with the request)."""
    from agentbake.buildkit.render import dockerpairs  # here: rollouts in catalog images never load jinja2

    args = [user.name, str(user.uid), str(user.gid), user.home, "1" if user.create else "0", workdir]
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
    client: docker.DockerClient, task: str, image: TaskImage, *, progress: Progress | None = None
) -> RunnableImage:
    """The runnable image of `image`, built when the engine lacks its tag."""
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
    try:
        user = choose_agent_user(files.get("/etc/passwd", ""))
    except TaskImageError as exc:
        raise TaskImageError(f"task {task}: image {image.ref}: {exc}") from None
    workdir = config.get("WorkingDir") or ""
    workdir = posixpath.normpath(workdir) if workdir not in ("", "/") else DEFAULT_WORKDIR
    if unsafe_workdir(workdir):
        raise TaskImageError(
            f"task {task}: image {image.ref}: its WORKDIR {workdir} holds what root runs or reads; agentbake gives "
            "the workdir to the agent's user, who could then change what the verifier runs as root: set WORKDIR "
            "to a directory of the task's own (e.g. /app)"
        )
    labels = runnable_labels(task, image, user, workdir)
    recipe = dockerfile(image, user, workdir, (config.get("User") or "").strip(), labels)
    digest = hashlib.sha256(length_prefixed(HASH_SCHEME) + length_prefixed(recipe.encode()))
    digest.update(length_prefixed(_PREPARE.read_bytes()))
    tag = f"{TAG_REPOSITORY}/{slug(task)}:{digest.hexdigest()[:12]}"
    found = image_id(client, tag)
    if found is not None:
        return RunnableImage(tag, found, labels, True, round(time.monotonic() - started, 3))
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
    return RunnableImage(tag, built, labels, False, round(time.monotonic() - started, 3))


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
