"""`agentbake prune`: remove the tags a catalog image no longer builds to.

Every input change makes a new `agentbake/<name>:<hash12>`; without pruning, old ones pile up on
the disk of every machine that builds. Only repositories of catalog images are touched, and the
current tag (and `latest`) always stays.
"""

from __future__ import annotations

from dataclasses import dataclass

import docker
from docker.errors import APIError

from agentbake.buildkit.build import BuildPlan


@dataclass(frozen=True)
class Pruned:
    """One stale tag: removed, or why not."""

    tag: str
    size_bytes: int
    removed: bool
    reason: str = ""


def stale_tags(client: docker.DockerClient, plans: list[BuildPlan]) -> list[tuple[str, int]]:
    """Tags of the plans' repositories other than each plan's current tag and `latest`, with sizes."""
    stale = []
    for build_plan in plans:
        repository = build_plan.tag.rsplit(":", 1)[0]
        keep = {build_plan.tag, f"{repository}:latest"}
        for image in client.images.list(name=repository):
            size = int(image.attrs["Size"])
            stale += [(tag, size) for tag in image.tags if tag.startswith(f"{repository}:") and tag not in keep]
    return sorted(stale)


def prune(client: docker.DockerClient, plans: list[BuildPlan], *, dry_run: bool = False) -> list[Pruned]:
    results = []
    for tag, size in stale_tags(client, plans):
        if dry_run:
            results.append(Pruned(tag, size, removed=False, reason="dry run"))
            continue
        try:
            client.images.remove(tag)
        except APIError as exc:  # e.g. a container still uses it
            results.append(Pruned(tag, size, removed=False, reason=exc.explanation or str(exc)))
        else:
            results.append(Pruned(tag, size, removed=True))
    return results
