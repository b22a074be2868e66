"""What `agentbake prune` removes of the task images' machinery: what this agentbake no longer makes.

- runnable images (`agentbake-run/*`) of another recipe: a rollout of their task builds the current one;
- agent bundles of another `bundle_script.sh`, or of an agent image the engine no longer has.
- layered images (`agentbake-env:*`, made to publish a task environment) of another runnable recipe, or whose
  bundle is gone: publishing that environment again makes the current one.

Task images (`agentbake-task/*`) stay: only the task directory knows its tag. A bundle a sandbox mounts stays.
"""

from __future__ import annotations

from dataclasses import dataclass

import docker
import docker.errors

from agentbake.buildkit.engine import image_id
from agentbake.buildkit.prune import Pruned
from agentbake.tasks.bundle import BUNDLE_LABEL, bundle_name
from agentbake.tasks.layered import BUNDLE_NAME_LABEL, REPOSITORY
from agentbake.tasks.runnable import RECIPE_LABEL, TAG_REPOSITORY, recipe_version


@dataclass(frozen=True)
class Stale:
    """One thing to remove: a runnable image's tag, or a bundle (its volume and recording container)."""

    name: str
    kind: str
    """`runnable`, `layered` or `bundle`."""
    size_bytes: int


def stale_task_artifacts(client: docker.DockerClient) -> list[Stale]:
    """Runnable images of another recipe and bundles no current agent image makes, sorted by name."""
    current = recipe_version()
    stale = []
    for image in client.images.list(filters={"label": "dev.agentbake.task.image"}):
        if (image.labels or {}).get(RECIPE_LABEL) != current:
            size = int(image.attrs["Size"])
            stale += [Stale(tag, "runnable", size) for tag in image.tags if tag.startswith(f"{TAG_REPOSITORY}/")]
    for container in client.api.containers(all=True, filters={"label": BUNDLE_LABEL}):
        name = container["Names"][0].lstrip("/")
        source = container["Labels"][BUNDLE_LABEL]
        if image_id(client, source) is None or bundle_name(source) != name:
            stale.append(Stale(name, "bundle", 0))
    kept = _volumes(client).difference(item.name for item in stale)
    for image in client.images.list(filters={"label": BUNDLE_NAME_LABEL}):
        labels = image.labels or {}
        if labels.get(RECIPE_LABEL) != current or labels[BUNDLE_NAME_LABEL] not in kept:
            size = int(image.attrs["Size"])
            stale += [Stale(tag, "layered", size) for tag in image.tags if tag.startswith(f"{REPOSITORY}:")]
    return sorted(stale, key=lambda item: item.name)


def _volumes(client: docker.DockerClient) -> set[str]:
    return {volume["Name"] for volume in client.api.volumes().get("Volumes") or []}


def prune_task_artifacts(client: docker.DockerClient, *, dry_run: bool = False) -> list[Pruned]:
    results = []
    for item in stale_task_artifacts(client):
        if dry_run:
            results.append(Pruned(item.name, item.size_bytes, removed=False, reason="dry run"))
            continue
        try:
            if item.kind in ("runnable", "layered"):
                client.images.remove(item.name)
            else:
                _remove_bundle(client, item.name)
        except docker.errors.APIError as exc:  # e.g. a sandbox still uses it
            results.append(Pruned(item.name, item.size_bytes, removed=False, reason=exc.explanation or str(exc)))
        else:
            results.append(Pruned(item.name, item.size_bytes, removed=True))
    return results


def _remove_bundle(client: docker.DockerClient, name: str) -> None:
    """The volume's users first: a running sandbox keeps it (APIError); then the record and the volume."""
    if client.api.containers(filters={"volume": name, "status": "running"}):
        raise docker.errors.APIError(f"volume {name} is mounted by a running sandbox", explanation="in use")
    client.api.remove_container(name, force=True)
    client.api.remove_volume(name)
