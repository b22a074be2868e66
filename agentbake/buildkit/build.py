"""Content-addressed builds on the Docker engine (legacy builder or BuildKit, see builders.py).

A build first computes the image's content hash; when the engine already has
`agentbake/<name>:<hash12>` the builder is not called at all.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from agentbake.buildkit.builders import Builder, Progress, run_build, seconds_since
from agentbake.buildkit.digest import content_hash, image_tag
from agentbake.buildkit.engine import ensure_base, find_image
from agentbake.buildkit.render import Rendered, render
from agentbake.buildkit.spec import ImageSpec
from agentbake.errors import BuildError


@dataclass(frozen=True)
class BuildResult:
    """What a build produced; `cached` means the builder was not invoked."""

    image: str
    tag: str
    id: str
    size_bytes: int
    cached: bool
    seconds: float


@dataclass(frozen=True)
class BuildPlan:
    """A rendered image with its content hash: everything needed to build or find it."""

    rendered: Rendered
    digest: str
    base_id: str
    """The id of the base image the digest was computed with."""

    @property
    def tag(self) -> str:
        return image_tag(self.rendered.spec.name, self.digest)


def plan(
    client: docker.DockerClient,
    spec: ImageSpec,
    templates_dir: Path,
    *,
    base_image: str | None = None,
    ca_cert: Path | None = None,
) -> BuildPlan:
    """Render the spec and hash it with its base image's id (pulled when absent, else an error with the fix)."""
    rendered = render(spec, templates_dir, base_image=base_image, ca_cert=ca_cert)
    base_id = ensure_base(client, rendered.base_image, spec.base.suite)
    return BuildPlan(rendered=rendered, digest=content_hash(rendered, base_id), base_id=base_id)


def build(
    client: docker.DockerClient,
    build_plan: BuildPlan,
    *,
    no_cache: bool = False,
    builder: Builder = "legacy",
    progress: Progress | None = None,
) -> BuildResult:
    """Build the plan's image unless the engine already has its tag; tag it `latest` too."""
    started = time.monotonic()
    spec = build_plan.rendered.spec
    image = None if no_cache else find_image(client, build_plan.tag)
    cached = image is not None
    if image is None:
        try:
            built_id = run_build(
                client,
                context_tar(build_plan.rendered.context_files()),
                build_plan.tag,
                builder=builder,
                no_cache=no_cache,
                labels=provenance_labels(spec.source_dir),
                progress=progress,
            )
        except BuildError as error:
            raise integrity_error(error, build_plan.rendered) or error from None
        image = client.images.get(built_id)
    image.tag(f"agentbake/{spec.name}", "latest")
    return BuildResult(
        image=spec.name,
        tag=build_plan.tag,
        id=image.id,
        size_bytes=int(image.attrs["Size"]),
        cached=cached,
        seconds=seconds_since(started),
    )


# Where the templates download each sha512-checked artifact, and the lock entry it comes from.
_CHECKED_DOWNLOADS = {"/tmp/npm.tgz": "npm", "/tmp/agent.tgz": "native"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the legacy builder colours a step's stderr
# pip's report of a wheel whose sha256 is not the locked one: `    name==version from URL ...:`.
_PIP_MISMATCH = re.compile(r"^\s+([A-Za-z0-9_.\-\[\]]+)==(\S+) from (\S+?)(?: \(|:$)")


def integrity_error(error: BuildError, rendered: Rendered) -> BuildError | None:
    """A clearer BuildError naming the package when a download did not match the lock's hash; None otherwise."""
    tail = [_ANSI.sub("", line).strip() for line in error.output_tail]
    lock_file = rendered.spec.lock_path
    fix = (
        f"if the registry really re-published it, re-lock with `agentbake lock {rendered.spec.name}`; otherwise "
        "the mirror or proxy in between serves other bytes"
    )
    packages: list[str] = []
    for path, key in _CHECKED_DOWNLOADS.items():
        artifact = rendered.lock.get(key)
        if artifact and f"{path}: FAILED" in tail:
            packages.append(
                f"{artifact['package']}@{artifact['version']} ({artifact['tarball']}) does not match "
                f"its sha512 in {lock_file} ({key}.sha512)"
            )
    if any("DO NOT MATCH THE HASHES" in line for line in tail):
        for line in error.output_tail:
            match = _PIP_MISMATCH.match(_ANSI.sub("", line))
            if match:
                packages.append(
                    f"the wheel of {match[1]}=={match[2]} ({match[3]}) does not match its sha256 in "
                    f"{lock_file} (python.packages)"
                )
    if not packages:
        return None
    message = f"building {rendered.spec.name}: {'; '.join(packages)}; {fix}"
    return BuildError(message, step=error.step, output_tail=error.output_tail)


def context_tar(files: dict[str, bytes]) -> bytes:
    """The build context as a tar with fixed owners and mtimes, so its bytes depend on content only."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


SOURCE_LABEL = "org.opencontainers.image.source"
REVISION_LABEL = "org.opencontainers.image.revision"


def provenance_labels(root: Path) -> dict[str, str]:
    """Source and revision of the catalog, set at build time: provenance, not content, so not hashed."""
    labels = {}
    if os.environ.get("GITHUB_REPOSITORY"):
        server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
        labels[SOURCE_LABEL] = f"{server}/{os.environ['GITHUB_REPOSITORY']}"
    else:
        remote = _git(root, "config", "--get", "remote.origin.url")
        if remote.startswith(("https://", "http://", "ssh://", "git@")):  # a local clone's path is no source
            labels[SOURCE_LABEL] = remote
    revision = os.environ.get("GITHUB_SHA") or _git(root, "rev-parse", "HEAD")
    if revision:
        labels[REVISION_LABEL] = revision
    return labels


def _git(root: Path, *args: str) -> str:
    try:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""
