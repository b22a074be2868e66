"""The layered image: a task's runnable image with the agent bundle's files in it at /opt/agentbake, for clouds
that start one image and mount no volume (E2B templates, Hugging Face sandboxes).

The sandbox sees what a Docker sandbox sees with the bundle mounted: the same paths, the same root-owned
files, the harness unchanged. It is keyed by the **environment hash** over what makes the sandbox (the task
image's id, the agent's user, home and workdir, the runnable recipe, and the bundle, which names the agent
image and its fill script), never the task's name: tasks with the same environment share one image, one E2B
template and one registry tag. Tagged `agentbake-env:<hash12>`.

Made once by copying the bundle's files into a container of the runnable image (no network) and committing
it. The container is named after the environment, so two processes layering the same one meet in the engine
(a name conflict) and the second waits for the first's tag.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass

import docker
import docker.errors

from agentbake.buildkit.builders import Progress, run_build, seconds_since
from agentbake.buildkit.digest import length_prefixed
from agentbake.buildkit.engine import image_id
from agentbake.buildkit.labels import LABEL_PREFIX, ImageLabels
from agentbake.errors import TaskImageError
from agentbake.tasks.bundle import BUNDLE_MOUNT, create_named, run_to_exit

HASH_SCHEME = b"agentbake-environment-v1"
REPOSITORY = "agentbake-env"
ENVIRONMENT_LABEL = LABEL_PREFIX + "environment"
"""On a layered image: its full environment hash."""
BUNDLE_NAME_LABEL = LABEL_PREFIX + "environment.bundle"
"""On a layered image: the bundle volume its agent was copied from (`agentbake prune` removes it with it)."""
LAYER_TIMEOUT_S = 600.0
_KEYED = ("user", "uid", "home", "dir_workdir", "dir_task", "dir_logs_agent", "dir_logs_verifier")
_SOURCE = ("task.image-id", "runnable.recipe")
_ABANDONED_S = 120.0
"""A layering container stopped this long without its process committing and removing it is abandoned."""
_STAGING = "/agentbake-bundle"
_COPY = f"mkdir -p {BUNDLE_MOUNT} && cp -a {_STAGING}/. {BUNDLE_MOUNT}/"


@dataclass(frozen=True)
class LayeredImage:
    """A built (or found) layered image."""

    tag: str
    """`agentbake-env:<hash12>`."""
    id: str
    environment: str
    """The full environment hash."""
    cached: bool
    seconds: float


def environment_hash(runnable_labels: Mapping[str, str], bundle: str) -> str:
    """sha256 over the runnable image's facts (not the task's name) and the bundle's name; TaskImageError when
    the labels are not a runnable image's."""
    keys = [ImageLabels.key(name) for name in _KEYED] + [LABEL_PREFIX + name for name in _SOURCE]
    missing = [key for key in keys if key not in runnable_labels]
    if missing:
        raise TaskImageError(
            f"not a runnable task image (labels {', '.join(missing)} missing); agentbake builds it for a task "
            "with environment/Dockerfile or [environment] docker_image"
        )
    digest = hashlib.sha256(length_prefixed(HASH_SCHEME) + length_prefixed(bundle.encode()))
    for key in keys:
        digest.update(length_prefixed(key.encode()) + length_prefixed(runnable_labels[key].encode()))
    return digest.hexdigest()


def layered_tag(environment: str) -> str:
    return f"{REPOSITORY}:{environment[:12]}"


def layered_image(
    client: docker.DockerClient, runnable: str, bundle: str, *, progress: Progress | None = None
) -> LayeredImage:
    """The layered image of the runnable image `runnable` (a tag or id) and the bundle volume `bundle`, made
    when the engine lacks its tag."""
    started = time.monotonic()
    attrs = client.api.inspect_image(runnable)
    config = attrs.get("Config") or {}
    environment = environment_hash(config.get("Labels") or {}, bundle)
    tag = layered_tag(environment)
    name = f"agentbake-layering-{environment[:12]}"
    deadline = time.monotonic() + LAYER_TIMEOUT_S
    while (found := image_id(client, tag)) is None:
        if time.monotonic() > deadline:
            raise TaskImageError(f"{tag}: another process's layering ({name}) did not finish in {LAYER_TIMEOUT_S} s")
        if _layer(client, attrs["Id"], bundle, name, tag, environment, config, progress or Progress()):
            return LayeredImage(tag, image_id(client, tag) or "", environment, False, seconds_since(started))
        _wait_for(client, name, deadline)
    return LayeredImage(tag, found, environment, True, seconds_since(started))


def _layer(
    client: docker.DockerClient,
    runnable_id: str,
    bundle: str,
    name: str,
    tag: str,
    environment: str,
    config: dict,
    progress: Progress,
) -> bool:
    """Copy the bundle in and commit; False when another process's container holds the name."""
    try:
        container = create_named(
            client,
            runnable_id,
            ["/bin/sh", "-c", _COPY],
            name,
            binds={bundle: {"bind": _STAGING, "mode": "ro"}},
            cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
        )
    except docker.errors.APIError as exc:
        raise TaskImageError(f"{tag}: cannot create the container that layers the agent in: {exc}") from None
    if container is None:
        return False
    progress.step(1, 1, f"{tag}: copying the agent bundle {bundle} into the task's image (once per environment)")
    try:
        code, tail = run_to_exit(client, container, LAYER_TIMEOUT_S)
        if code != 0:
            raise TaskImageError(f"{tag}: copying the agent bundle in failed (exit {code}): {tail}")
        committed = client.api.commit(container, changes=_restore(config, environment, bundle))["Id"]
        # A commit keeps the copy's command: a build step empties it again, as the runnable image has it. The
        # container stays until the tag exists: another process waits for it rather than layering again.
        from agentbake.buildkit.build import context_tar  # here: rollouts never load the build kit's renderer

        recipe = f"FROM {committed}\nENTRYPOINT []\nCMD []\n"
        context = context_tar({"Dockerfile": recipe.encode()})
        run_build(client, context, tag, progress=progress, timeout_s=LAYER_TIMEOUT_S)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(container, force=True)
    return True


def _restore(config: dict, environment: str, bundle: str) -> list[str]:
    """Commit changes giving the image back the runnable image's user and workdir, and its environment label."""
    changes = [
        f"USER {config.get('User') or 'root'}",
        f"LABEL {ENVIRONMENT_LABEL}={environment} {BUNDLE_NAME_LABEL}={bundle}",
    ]
    if config.get("WorkingDir"):
        changes.append(f"WORKDIR {config['WorkingDir']}")
    return changes


def _wait_for(client: docker.DockerClient, name: str, deadline: float) -> None:
    """Until the container `name` (another process layering) is gone; one that stopped without being removed
    (its process died) is removed after a grace period, so the caller layers anew."""
    stopped_since: float | None = None
    while time.monotonic() < deadline:
        try:
            running = client.api.inspect_container(name)["State"].get("Running")
        except docker.errors.NotFound:
            return
        stopped_since = None if running else (stopped_since or time.monotonic())
        if stopped_since is not None and time.monotonic() - stopped_since > _ABANDONED_S:
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(name, force=True)
            return
        time.sleep(0.5)
