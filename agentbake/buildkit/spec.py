"""Image specs: `images/<name>/image.toml`, validated on load.

A spec may `extends = "<other image>"`: tables merge key by key, lists are
appended (so a spec can add Debian packages to claude-code), scalars override.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentbake.buildkit.spec_files import LOCK_FILE
from agentbake.errors import SpecError

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class BaseImage(_Strict):
    """The image the Dockerfile starts FROM."""

    image: str = "debian:bookworm-slim"
    """Image reference; `agentbake build --base-image REF` overrides it for one build."""
    suite: Literal["bookworm", "trixie"] = "bookworm"
    """Debian suite of that image; `agentbake base debian --suite` builds it offline."""
    python: str = Field("3.11", pattern=r"^3\.\d+$")
    """Version of the base's python3 (major.minor): the gateway's wheels are locked for it."""
    why: str
    """Why this suite: what the agent needs at run time that it provides."""


class Agent(_Strict):
    """The coding agent's CLI and how it is installed."""

    name: str
    """Human name of the agent, e.g. "Claude Code"."""
    package: str
    """Package of the CLI: on npm, e.g. "@anthropic-ai/claude-code", or on PyPI with install = "pip"."""
    version: str
    """Version or range of `package` (npm's, or PEP 440's with install = "pip"); `agentbake lock` resolves it to
    one exact version."""
    command: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    """Executable name put on PATH, e.g. "claude"."""
    install: Literal["native", "npm", "pip"]
    """"native": extract one platform binary, no Node in the image; "npm": `npm ci` from the lock, Node stays;
    "pip": the locked, hash-checked wheels of a Python CLI in a venv of its own."""
    native_package: str | None = None
    """With install = "native": the npm package holding the linux-x64 glibc binary."""
    native_binary: str | None = None
    """With install = "native": path of the binary inside `native_package`, e.g. "claude"."""
    npm: str = "10"
    """With install = "npm": npm version (range) fetched from the registry for the install and removed after."""
    exclude: list[str] = []
    """With install = "pip": distributions the CLI requires but never imports when run headless, left out of the lock
    with what only they need."""

    @model_validator(mode="after")
    def _native_fields(self) -> Agent:
        if self.install == "native" and not (self.native_package and self.native_binary):
            raise ValueError('install = "native" needs native_package and native_binary')
        if self.exclude and self.install != "pip":
            raise ValueError('exclude is for install = "pip"')
        return self


class User(_Strict):
    """The non-root user the agent runs as."""

    name: str = Field("agent", pattern=r"^[a-z_][a-z0-9_-]*$")
    """Login name; its home holds the harness directories."""
    uid: int = Field(1000, ge=1, le=60000)
    """Fixed uid (and gid), so files written into mounted volumes have a known owner."""


class Resources(_Strict):
    """What a sandbox of this image is given where the platform fixes it per template (E2B).

    Run-time settings: left out of the content hash, so changing them rebuilds nothing."""

    cpus: int = Field(2, ge=1, le=64)
    """vCPUs of each sandbox."""
    memory_mb: int = Field(2048, ge=512, le=65536)
    """Memory of each sandbox in MiB."""


class ImageSpec(_Strict):
    """One catalog image: base, agent, extra packages and commands."""

    name: str
    """Image name, the spec's folder name; tags are `agentbake/<name>:<hash12>`."""
    description: str
    """One line shown by `agentbake images`."""
    base: BaseImage
    """The base image."""
    agent: Agent
    """The agent CLI baked in."""
    packages: list[str] = []
    """Extra Debian packages, on top of the ones every image carries."""
    env: dict[str, str] = {}
    """Extra environment variables set in the image."""
    run: list[str] = []
    """Extra shell commands run as root after everything else, e.g. a task's dependencies."""
    user: User = User()
    """The non-root user."""
    resources: Resources = Field(Resources(), exclude=True)
    """`[resources]`: CPUs and memory of a sandbox, where a platform asks at publish time (E2B templates)."""
    source_dir: Path = Field(exclude=True)
    """Folder of the image.toml (its lock.json lives beside it)."""

    @property
    def lock_path(self) -> Path:
        return self.source_dir / LOCK_FILE

    @property
    def spec_hash(self) -> str:
        """sha256 of the resolved spec: what the image was asked to be, independent of where it lies."""
        data = self.model_dump(mode="json")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def validate_spec(data: dict[str, Any], *, name: str, source: Path) -> ImageSpec:
    """Validate raw TOML data; errors name the file, the key and what was expected."""
    if not _NAME.match(name):
        raise SpecError(
            f"{source}: image name {name!r} (the folder name) must be lowercase letters, digits, '.', '_' or '-'"
        )
    try:
        return ImageSpec.model_validate({**data, "name": name, "source_dir": source.parent})
    except ValidationError as exc:
        raise SpecError(f"{source}: " + "; ".join(_describe(e) for e in exc.errors())) from None


def _describe(error: Any) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = _model_at(error["loc"][:-1])
        allowed = ", ".join(f for f in parent.model_fields if f not in ("name", "source_dir"))
        return f"unknown key {key!r}; allowed here: {allowed}"
    if kind == "missing":
        return f"missing required key {key!r}"
    got = error.get("input")
    return f"key {key!r}: {error['msg'].lower()} (got {got!r} of type {type(got).__name__})"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel]:
    model: type[BaseModel] = ImageSpec
    for part in loc:
        annotation = model.model_fields[str(part)].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return model
