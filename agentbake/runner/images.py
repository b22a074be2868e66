"""The image a run names, on the local engine: a catalog name resolved to its current content tag (built when
missing), and the image's `dev.agentbake.*` labels, which tell the runner its agent, user and paths.

Nothing is imported until a function runs: the CLI's `--help` pays for neither the engine's SDK nor the
build kit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbake.errors import AgentbakeError, SandboxError

if TYPE_CHECKING:
    from agentbake.buildkit.labels import ImageLabels


def resolve_image(image: str, *, build_missing: bool = True) -> str:
    """A catalog name to its current content tag, built (with progress on stderr) when the engine lacks it and
    `build_missing`; a reference with a ':' or '/' is taken as it is."""
    from agentbake.buildkit.build import build, plan
    from agentbake.buildkit.ca import detect_ca_bundle
    from agentbake.buildkit.catalog import Catalog
    from agentbake.buildkit.engine import connect, find_image
    from agentbake.runner.display import build_progress

    client = connect()
    if ":" in image or "/" in image:
        if find_image(client, image) is None:
            raise AgentbakeError(f"image {image!r} is not on this engine; build a catalog image with `agentbake build`")
        return image
    catalog = Catalog.discover()
    build_plan = plan(client, catalog.load(image), catalog.templates_dir, ca_cert=detect_ca_bundle())
    if build_missing and find_image(client, build_plan.tag) is None:
        progress = build_progress(build_plan.tag)  # rich's progress bars only when something builds
        try:
            build(client, build_plan, progress=progress)
        finally:
            progress.close()
    return build_plan.tag


def image_labels(image: str) -> ImageLabels:
    """The image's `dev.agentbake.*` labels as the local engine holds them."""
    from agentbake.buildkit.engine import connect, find_image
    from agentbake.buildkit.labels import ImageLabels

    found = find_image(connect(timeout=30), image)
    if found is None:
        raise SandboxError(f"image {image!r} is not on this engine; build it with `agentbake build <name>`")
    return ImageLabels.from_labels(image, found.labels or {})
