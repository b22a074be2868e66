"""`agentbake base debian`: a Debian base image from debootstrap, for engines that cannot pull.

The image may stand in locally under the reference specs use by default
(debian:<suite>-slim), so specs stay unchanged offline.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from agentbake.buildkit.catalog import builtin_root
from agentbake.buildkit.render import DPKG_SLIM
from agentbake.errors import BuildError

DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE_LABEL = "dev.agentbake.base.suite"
MIRROR_LABEL = "dev.agentbake.base.mirror"
RECIPE_LABEL = "dev.agentbake.base.recipe"
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
    """Build (or find) a minbase Debian image; one of ours with another suite, mirror or recipe is rebuilt."""
    tag = tag or default_tag(suite)
    dpkg_config = (builtin_root() / "templates" / DPKG_SLIM).read_text()
    recipe = hashlib.sha256(f"debootstrap --variant=minbase\n{dpkg_config}".encode()).hexdigest()[:12]
    wanted = {SUITE_LABEL: suite, MIRROR_LABEL: mirror, RECIPE_LABEL: recipe}
    try:
        existing = client.images.get(tag)
    except ImageNotFound:
        existing = None
    if existing is not None:
        labels = existing.labels or {}
        # An image from a registry has no agentbake labels: it is the real thing, keep it.
        if SUITE_LABEL not in labels or all(labels.get(key) == value for key, value in wanted.items()):
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
        slim(rootfs, dpkg_config)
        archive = Path(tmp, "rootfs.tar")
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."], log, "tar of the rootfs")
        repository, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
        changes = [
            "LABEL " + " ".join(f'{key}="{value}"' for key, value in wanted.items()),
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["bash"]',
        ]
        client.api.import_image_from_file(str(archive), repository=repository, tag=version, changes=changes)
    return BaseResult(tag=tag, id=client.images.get(tag).id, created=True)


def slim(rootfs: Path, dpkg_config: str) -> None:
    """Install the dpkg path excludes and delete what they exclude, as Debian's slim images do."""
    rules = [line.split(None, 1) for line in dpkg_config.splitlines() if line.startswith("path-")]
    excludes = [glob for kind, glob in rules if kind == "path-exclude"]
    includes = [glob for kind, glob in rules if kind == "path-include"]
    (rootfs / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/dpkg/dpkg.cfg.d/agentbake-slim").write_text(dpkg_config)
    # dpkg matches with fnmatch(3) without FNM_PATHNAME: `*` spans `/`, like Python's fnmatch.
    for path in sorted((rootfs / "usr/share").rglob("*"), reverse=True):
        name = "/" + str(path.relative_to(rootfs))
        if path.is_symlink() or path.is_file():
            if any(fnmatch(name, g) for g in excludes) and not any(fnmatch(name, g) for g in includes):
                path.unlink()
        elif path.is_dir() and any(fnmatch(name, g) for g in excludes) and not any(path.iterdir()):
            path.rmdir()


def _run(cmd: list[str], log: Callable[[str], None], what: str) -> None:
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip())
            log(line.rstrip())
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode})", step=what, output_tail=lines[-25:])
