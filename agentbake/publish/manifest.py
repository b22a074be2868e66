"""The published manifest: per image and content hash, every reference publishing gave it.

A plain JSON file with no timestamps, so equal publications write equal bytes. A remote runner reads it, with no Docker
engine, to find an agent's registry reference, E2B template or Hugging Face image.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentbake.errors import PublishError

MANIFEST_ENV = "AGENTBAKE_PUBLISHED"
DEFAULT_MANIFEST = Path("published.json")
SCHEMA = "agentbake-published/1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, populate_by_name=True)


class RegistryRef(_Model):
    """One registry copy of the image."""

    reference: str
    """`repository:hash12`, what `docker pull` takes."""
    digest: str
    """Manifest digest the registry reported (`sha256:...`); `repository@digest` pins the exact bytes."""


class ImageRecord(_Model):
    """Everything one content hash of one image was published as."""

    tag: str
    """The local tag, `agentbake/<name>:<hash12>`."""
    registry: dict[str, RegistryRef] = {}
    """By repository (`ghcr.io/org/agentbake/claude-code`): the pushed tag and its digest."""
    e2b_template: str | None = None
    """E2B template `name:hash12`, for `Sandbox.create(template=...)`."""
    hf_image: str | None = None
    """Reference a Hugging Face sandbox takes as `image=` (a registry reference or `hf.co/spaces/NS/NAME`)."""
    hf_space: str | None = None
    """Docker Space `NS/NAME` holding the rendered Dockerfile and context."""


class EnvironmentRecord(_Model):
    """One task environment (a task's image with an agent layered in, `agentbake.tasks.layered`) as published."""

    tag: str
    """The local tag, `agentbake-env:<hash12>`."""
    agent: str
    """The catalog agent image layered in (`agentbake/claude-code:<hash12>`)."""
    tasks: list[str] = []
    """The tasks published with this environment (sorted): every task with the same one shares it."""
    registry: dict[str, RegistryRef] = {}
    """By repository: the pushed tag and its digest."""
    e2b_template: str | None = None
    """E2B template `agentbake-env-<hash12>:<hash12>`."""
    hf_image: str | None = None
    """The registry reference a Hugging Face sandbox takes as `image=`."""


class Published(_Model):
    """The manifest file's content."""

    schema_: Literal["agentbake-published/1"] = Field(SCHEMA, alias="schema")
    """Format version of this file."""
    images: dict[str, dict[str, ImageRecord]] = {}
    """Image name -> full content hash -> what it was published as."""
    current: dict[str, str] = {}
    """Image name -> the content hash published last: what `resolve(name)` returns."""
    environments: dict[str, EnvironmentRecord] = {}
    """Full environment hash -> the task environment published under it (`agentbake publish --path`)."""

    def environment(self, environment: str, tag: str, agent: str) -> EnvironmentRecord:
        """The record of this environment (created empty)."""
        return self.environments.setdefault(environment, EnvironmentRecord(tag=tag, agent=agent))

    def resolve_environment(self, environment: str, task: str | None = None) -> EnvironmentRecord:
        """The record of a task environment; an error naming the command that publishes it."""
        found = self.environments.get(environment)
        if found is None:
            tasks = f"--path {task}" if task else "--path DIR"
            raise PublishError(
                f"task environment {environment[:12]} is not in the published manifest "
                f"({len(self.environments)} environments are); run `agentbake publish AGENT {tasks} ...` first"
            )
        return found

    def record(self, image: str, content_hash: str, tag: str) -> ImageRecord:
        """The record of this image and hash (created empty), now the image's current one."""
        by_hash = self.images.setdefault(image, {})
        entry = by_hash.setdefault(content_hash, ImageRecord(tag=tag))
        self.current[image] = content_hash
        return entry

    def resolve(self, image: str, content_hash: str | None = None) -> ImageRecord:
        """The record of `image` at `content_hash` (or its current one); an error naming what is published."""
        by_hash = self.images.get(image)
        if not by_hash:
            known = ", ".join(sorted(self.images)) or "none"
            raise PublishError(
                f"image {image!r} is not in the published manifest (published: {known}); "
                f"run `agentbake publish {image} --registry REPO` first"
            )
        wanted = content_hash or self.current.get(image, "")
        matches = [h for h in by_hash if h.startswith(wanted)] if wanted else []
        if len(matches) != 1:
            raise PublishError(
                f"image {image!r}: no single published content hash matches {wanted!r} "
                f"(published: {', '.join(sorted(h[:12] for h in by_hash))})"
            )
        return by_hash[matches[0]]

    def dumps(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True) + "\n"


def manifest_path(path: Path | None = None) -> Path:
    """`path`, else $AGENTBAKE_PUBLISHED, else ./published.json."""
    return path or Path(os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST)


def load_manifest(path: Path, *, missing_ok: bool = True) -> Published:
    """Read the manifest; a missing file is an empty manifest (or an error when not `missing_ok`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing_ok:
            return Published()
        raise PublishError(
            f"{path}: no published manifest here; `agentbake publish` writes it "
            f"(or point {MANIFEST_ENV} / --manifest at it)"
        ) from None
    try:
        return Published.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors())
        raise PublishError(
            f"{path}: not a published manifest ({problems}); fix it or delete it and publish again"
        ) from None


def save_manifest(path: Path, published: Published) -> None:
    """Write atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(published.dumps(), encoding="utf-8")
    os.replace(partial, path)
