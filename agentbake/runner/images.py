"""The image a run names, on the local engine: a catalog name resolved to its content tag, and its labels.

The `dev.agentbake.*` labels tell the runner its agent, user and paths. Imports wait until a function runs, so `--help`
loads neither the engine's SDK nor the build kit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.errors import AgentbakeError, SandboxError

if TYPE_CHECKING:
    import docker

    from agentbake.buildkit.build import BuildPlan
    from agentbake.buildkit.catalog import Catalog
    from agentbake.buildkit.labels import ImageLabels

_SEEN_LABELS: dict[str, dict[str, str]] = {}
"""The labels `resolve_image` read as it checked an image, for the next `image_labels` of that reference to
take (once): the CLI's runner starts with no second inspection of the image its image resolution just made."""


def resolve_image(image: str, *, build_missing: bool = True) -> str:
    """A catalog name to its current content tag, built when missing and `build_missing`.

    A reference with ':' or '/' is taken as it is. The tag comes from the user's cache when no input changed."""
    from agentbake.buildkit.ca import detect_ca_bundle
    from agentbake.buildkit.catalog import Catalog
    from agentbake.buildkit.engine import connect, find_image
    from agentbake.buildkit.tag_cache import cached_tag, remember_tag, tag_key

    client = connect()
    if ":" in image or "/" in image:
        found = find_image(client, image)
        if found is None:
            raise AgentbakeError(f"image {image!r} is not on this engine; build a catalog image with `agentbake build`")
        _SEEN_LABELS[image] = found.labels or {}
        return image
    catalog = Catalog.discover()
    ca_cert = detect_ca_bundle()
    key = tag_key(image, catalog, ca_cert=ca_cert)
    tag = cached_tag(client, image, key)
    build_plan: BuildPlan | None = None
    if tag is None:
        build_plan = _plan(client, image, catalog, ca_cert)
        remember_tag(key, build_plan)
        tag = build_plan.tag
    found = find_image(client, tag)
    if found is not None:
        _SEEN_LABELS[tag] = found.labels or {}
    elif build_missing:
        _build(client, build_plan or _plan(client, image, catalog, ca_cert))
    return tag


def _plan(client: docker.DockerClient, image: str, catalog: Catalog, ca_cert: Path | None) -> BuildPlan:
    from agentbake.buildkit.build import plan

    return plan(client, catalog.load(image), catalog.templates_dir, ca_cert=ca_cert)


def _build(client: docker.DockerClient, build_plan: BuildPlan) -> None:
    from agentbake.buildkit.build import build
    from agentbake.runner.cli.display import build_progress

    progress = build_progress(build_plan.tag)  # rich's progress bars only when something builds
    try:
        build(client, build_plan, progress=progress)
    finally:
        progress.close()


def image_labels(image: str) -> ImageLabels:
    """The image's `dev.agentbake.*` labels as the local engine holds them (as `resolve_image` just read them,
    when it did)."""
    from agentbake.buildkit.labels import ImageLabels

    labels = _SEEN_LABELS.pop(image, None)
    if labels is None:
        from agentbake.buildkit.engine import connect, find_image

        found = find_image(connect(timeout=30), image)
        if found is None:
            raise SandboxError(f"image {image!r} is not on this engine; build it with `agentbake build <name>`")
        labels = found.labels or {}
    return ImageLabels.from_labels(image, labels)
