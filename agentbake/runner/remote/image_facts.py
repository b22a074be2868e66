"""What a remote backend knows of an image it starts: its labels, read on the local engine (a remote sandbox cannot read
them), and its published reference, looked up by content hash (never a moving tag) or, for a task image, by environment
hash."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentbake.buildkit.labels import ImageLabels
from agentbake.errors import SandboxError


@dataclass(frozen=True)
class ImageFacts:
    """What the harness needs to know about an image it runs remotely (from its labels)."""

    ref: str
    """The local content-hash tag, `agentbake/<name>:<hash12>`."""
    name: str
    """The catalog name (`claude-code`), the key of the published manifest."""
    content_hash: str
    """The `dev.agentbake.spec-hash` label."""
    user: str
    """The image's non-root user (label `dev.agentbake.user`)."""
    python: str
    """The baked interpreter (label `dev.agentbake.python`): runs the gateway in `--gateway sandbox` mode."""
    paths: dict[str, str] = field(default_factory=dict)
    git: str = "git"
    """The git the harness snapshots and diffs the workdir with (a task image's: the bundle's)."""
    environment: str | None = None
    """A task image's environment hash: the sandbox starts its published layered image."""

    @classmethod
    def from_labels(cls, ref: str, labels: Mapping[str, str]) -> ImageFacts:
        image = ImageLabels.from_labels(ref, labels)
        if image.user in ("root", "0"):
            raise SandboxError(
                f"image {ref!r} has no label dev.agentbake.user naming a non-root user; build it with `agentbake build`"
            )
        repository = ref.rpartition(":")[0] if ":" in ref.rsplit("/", 1)[-1] else ref
        return cls(
            ref=ref,
            name=repository.rsplit("/", 1)[-1],
            content_hash=image.spec_hash,
            user=image.user,
            python=image.python,
            paths=image.paths,
        )


def local_image_facts(ref: str) -> ImageFacts:
    """The labels of the image as the local engine holds it (it was built here before it was published)."""
    from agentbake.buildkit.engine import connect, find_image

    found = find_image(connect(timeout=30), ref)
    if found is None:
        raise SandboxError(
            f"image {ref!r} is not on this engine: the remote backends read its labels locally; "
            "build it with `agentbake build <name>` (the tag is listed by `agentbake images`)"
        )
    return ImageFacts.from_labels(ref, found.labels or {})


def environment_facts(ref: str, bundle: str) -> ImageFacts:
    """A task's runnable image `ref` with the agent bundle `bundle`: its user and paths from its labels, its environment
    hash.

    Root is allowed: a task image's user is Harbor's."""
    from agentbake.buildkit.engine import connect, find_image
    from agentbake.tasks.layered import REPOSITORY, environment_hash

    found = find_image(connect(timeout=30), ref)
    if found is None:
        raise SandboxError(f"task image {ref!r} is not on this engine; the runner builds it before a rollout")
    labels = found.labels or {}
    environment = environment_hash(labels, bundle)
    return ImageFacts(
        ref=ref,
        name=REPOSITORY,
        content_hash=environment,
        user=labels[ImageLabels.key("user")],
        python=labels[ImageLabels.key("python")],
        paths={short: labels[key] for short, key in ImageLabels.path_keys().items()},
        git=labels.get(ImageLabels.key("git")) or "git",
        environment=environment,
    )


def published_record(facts: ImageFacts, manifest: Path | None) -> object:
    """The published manifest's record of this image at its content hash (not the image's current one), or of
    its task environment."""
    from agentbake.publish.manifest import load_manifest, manifest_path

    published = load_manifest(manifest_path(manifest), missing_ok=False)
    if facts.environment is not None:
        return published.resolve_environment(facts.environment)
    return published.resolve(facts.name, facts.content_hash)


def published_reference(facts: ImageFacts, manifest: Path | None, field: str, target: str, how: str) -> str:
    """This content hash's reference for one target (`field` of its manifest record), or an error naming
    the command that publishes it (`how`, e.g. "--e2b (or set E2BConfig.template)")."""
    reference = getattr(published_record(facts, manifest), field, None)
    if not reference and facts.environment is not None:
        flag = how.split("`", 1)[0].split()[0]
        raise SandboxError(
            f"task environment {facts.environment[:12]} has no {target} in the published manifest; run "
            f"`agentbake publish AGENT --path DIR --registry REPO {flag}`"
        )
    if not reference:
        raise SandboxError(
            f"image {facts.name!r} at {facts.content_hash[:12]} has no {target} in the published manifest; "
            f"run `agentbake publish {facts.name} {how}"
        )
    return reference


def refuse_moving_tag(reference: str, what: str) -> str:
    """A remote reference must pin the content: a missing tag or `latest` could name another image tomorrow."""
    last = reference.rsplit("/", 1)[-1]
    if "@sha256:" in reference:
        return reference
    if ":" not in last or last.endswith(":latest"):
        raise SandboxError(
            f"{what} {reference!r} does not pin the image's content: use the content-hash tag or a digest "
            "(`agentbake published` lists them), never `latest` or no tag"
        )
    return reference
