"""`agentbake base debian`: a Debian base image from debootstrap, for engines that cannot pull.

The image may stand in locally under the reference specs use by default
(debian:<suite>-slim), so specs stay unchanged offline.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from agentbake.errors import BuildError

DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE_LABEL = "dev.agentbake.base.suite"
MIRROR_LABEL = "dev.agentbake.base.mirror"
# Caches that debootstrap leaves behind and an image must not carry.
_CACHES = ("var/cache/apt/archives", "var/lib/apt/lists")


@dataclass(frozen=True)
class BaseResult:
    """The base image and whether this call created it."""

    tag: str
    id: str
    created: bool


def default_tag(suite: str) -> str:
    return f"debian:{suite}-slim"


def debian_base(
    client: docker.DockerClient,
    suite: str,
    *,
    mirror: str = DEFAULT_MIRROR,
    tag: str | None = None,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> BaseResult:
    """Build (or find) a minbase Debian image; an existing image with other suite/mirror labels is rebuilt."""
    tag = tag or default_tag(suite)
    try:
        existing = client.images.get(tag)
    except ImageNotFound:
        existing = None
    if existing is not None:
        labels = existing.labels or {}
        # An image from a registry has no agentbake labels: it is the real thing, keep it.
        if SUITE_LABEL not in labels or (labels[SUITE_LABEL], labels.get(MIRROR_LABEL)) == (suite, mirror):
            return BaseResult(tag=tag, id=existing.id, created=False)
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise BuildError("debootstrap is not installed; on Debian/Ubuntu: apt-get install debootstrap (as root)")
    with tempfile.TemporaryDirectory(prefix="agentbake-base-", dir=workdir) as tmp:
        rootfs = Path(tmp, "rootfs")
        _run(
            [debootstrap, "--variant=minbase", suite, str(rootfs), mirror],
            log,
            f"debootstrap {suite} {mirror}",
        )
        for cache in _CACHES:
            for entry in (rootfs / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        archive = Path(tmp, "rootfs.tar")
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."], log, "tar of the rootfs")
        repository, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
        changes = [
            f'LABEL {SUITE_LABEL}="{suite}" {MIRROR_LABEL}="{mirror}"',
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["bash"]',
        ]
        client.api.import_image_from_file(str(archive), repository=repository, tag=version, changes=changes)
    return BaseResult(tag=tag, id=client.images.get(tag).id, created=True)


def _run(cmd: list[str], log: Callable[[str], None], what: str) -> None:
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip())
            log(line.rstrip())
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode})", step=what, output_tail=lines[-25:])
