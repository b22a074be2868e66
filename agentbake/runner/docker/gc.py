"""`agentbake gc`: remove what Docker sandboxes left when their runner could not clean up.

Everything the runner creates carries labels (labels.py). `collect` removes each labelled container, snapshot image
or network that expired or whose owner process is gone, with its host folder.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from agentbake.runner.docker import labels
from agentbake.runner.docker.config import default_runtime_dir

# A host folder with no container is only an orphan once a create in flight would have made one.
_ORPHAN_AGE_S = 120


@dataclass(frozen=True)
class Leftover:
    """Something a sandbox left behind, and why it goes."""

    kind: str
    """`container`, `network`, `image` (a verifier's snapshot of an agent's sandbox) or `folder`."""
    name: str
    rollout: str
    reason: str
    """`expired`, `owner gone` or `no container` (a host folder whose container is gone)."""
    removed: bool
    """False under --dry-run, or when removing failed (`error` says why)."""
    error: str | None = None


def _reason(item_labels: dict[str, str], now: float) -> str | None:
    try:
        if float(item_labels.get(labels.EXPIRES, "inf")) <= now:
            return "expired"
    except ValueError:
        pass
    if labels.owner_alive(item_labels.get(labels.OWNER, "")) is False:
        return "owner gone"
    return None


def _ours(item_labels: dict[str, str]) -> bool:
    """Whether the owner ran on this host (its folders are here)."""
    return labels.owner_alive(item_labels.get(labels.OWNER, "")) is not None


def _remove_folder(path: Path, name: str) -> None:
    # Only a sandbox's own folder (named as its container), never whatever a label names.
    if path.name == name and name.startswith("agentbake-") and path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _remove_container(api: docker.APIClient, container: dict, name: str) -> None:
    api.remove_container(container["Id"], force=True, v=True)
    item_labels = container.get("Labels") or {}
    if _ours(item_labels) and labels.RUNTIME_DIR in item_labels:
        _remove_folder(Path(item_labels[labels.RUNTIME_DIR]), name)


def collect(
    api: docker.APIClient, *, dry_run: bool = False, runtime_dir: Path | None = None, now: float | None = None
) -> list[Leftover]:
    """Remove (or list, with `dry_run`) every labelled container and network that expired or whose owner is gone, with
    their host folders."""
    now = time.time() if now is None else now
    runtime_dir = runtime_dir or default_runtime_dir()
    doomed: list[tuple[str, str, str, str, Callable[[], object]]] = []  # kind, name, rollout, reason, remove

    containers = api.containers(all=True, filters={"label": labels.ROLLOUT})
    names = {c["Names"][0].lstrip("/") for c in containers if c.get("Names")}
    for container in containers:
        item_labels = container.get("Labels") or {}
        if (reason := _reason(item_labels, now)) is not None:
            name = container["Names"][0].lstrip("/") if container.get("Names") else container["Id"][:12]
            remove = functools.partial(_remove_container, api, container, name)
            doomed.append(("container", name, item_labels.get(labels.ROLLOUT, ""), reason, remove))
    for network in api.networks(filters={"label": labels.ROLLOUT}):
        item_labels = network.get("Labels") or {}
        if (reason := _reason(item_labels, now)) is not None:
            remove = functools.partial(api.remove_network, network["Id"])
            doomed.append(("network", network["Name"], item_labels.get(labels.ROLLOUT, ""), reason, remove))
    for image in api.images(
        filters={"label": labels.ROLLOUT}
    ):  # snapshots (verifier_sandbox.py): after their containers
        item_labels = image.get("Labels") or {}
        if (reason := _reason(item_labels, now)) is not None:
            remove = functools.partial(api.remove_image, image["Id"], force=True)
            name = next(iter(image.get("RepoTags") or []), image["Id"][:19])
            doomed.append(("image", name, item_labels.get(labels.ROLLOUT, ""), reason, remove))
    if runtime_dir.is_dir():
        for folder in sorted(runtime_dir.iterdir()):
            if folder.is_dir() and folder.name not in names and now - folder.stat().st_mtime >= _ORPHAN_AGE_S:
                remove = functools.partial(shutil.rmtree, folder, ignore_errors=True)
                doomed.append(("folder", str(folder), "", "no container", remove))

    found = []
    for kind, name, rollout, reason, remove in doomed:
        error = None
        if not dry_run:
            try:
                remove()
            except docker.errors.NotFound:
                pass  # gone meanwhile (its owner closed it): what we wanted
            except docker.errors.DockerException as exc:
                error = str(exc)
        found.append(Leftover(kind, name, rollout, reason, removed=not dry_run and error is None, error=error))
    return found
