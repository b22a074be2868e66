"""A catalog name's content tag, remembered between runs, so `agentbake run claude-code` skips ~140 ms of imports and
rendering.

An entry is keyed on every input of the tag but the base image's id: the catalog's specs and locks, templates, CA
bundle, the build kit's code, jinja2's and agentbake's versions, pyproject.toml. The base image's id is stored in
the entry and checked on each use. Entries are files under `<user cache>/agentbake/tags/`, written whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import docker
from docker.errors import DockerException

from agentbake import __version__
from agentbake.buildkit.catalog import Catalog, builtin_root
from agentbake.buildkit.digest import length_prefixed
from agentbake.buildkit.engine import image_id
from agentbake.buildkit.spec_files import LOCK_FILE, SPEC_FILE
from agentbake.user_cache import user_cache_dir

if TYPE_CHECKING:
    from agentbake.buildkit.build import BuildPlan

KEY_SCHEME = b"agentbake-tag-cache-v1"
_BUILDKIT_DIR = Path(__file__).resolve().parent


def tag_key(name: str, catalog: Catalog, *, ca_cert: Path | None) -> str | None:
    """The key of `name`'s tag, or None when an input cannot be read (the render then says why)."""
    files = [path for folder in catalog.dirs for name_ in (SPEC_FILE, LOCK_FILE) for path in folder.glob(f"*/{name_}")]
    files += [path for path in catalog.templates_dir.rglob("*") if path.is_file()]
    files += _BUILDKIT_DIR.glob("*.py")
    pyproject = builtin_root() / "pyproject.toml"
    if pyproject.is_file():
        files.append(pyproject)
    jinja2 = importlib.util.find_spec("jinja2")  # finds its files without importing it
    if jinja2 is not None and jinja2.origin is not None:
        files.append(Path(jinja2.origin))  # its __init__.py holds __version__
    if ca_cert is not None:
        files.append(ca_cert)
    digest = hashlib.sha256(length_prefixed(KEY_SCHEME))
    for label, data in (("name", name), ("version", __version__), ("ca_cert", str(ca_cert is not None))):
        digest.update(length_prefixed(label.encode()) + length_prefixed(data.encode()))
    try:
        for path in sorted(set(files)):
            digest.update(length_prefixed(str(path).encode()) + length_prefixed(path.read_bytes()))
    except OSError:
        return None
    return digest.hexdigest()


def cached_tag(client: docker.DockerClient, name: str, key: str | None) -> str | None:
    """The tag remembered under `key` when the engine's base image is still the one it was computed with; None
    otherwise."""
    path = entry_path(key)
    if path is None:
        return None
    try:
        entry = json.loads(path.read_text())
        tag, base_image, base_id = entry["tag"], entry["base_image"], entry["base_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(value, str) for value in (tag, base_image, base_id)):
        return None
    if not re.fullmatch(rf"agentbake/{re.escape(name)}:[0-9a-f]{{12}}", tag):
        return None
    try:
        current = image_id(client, base_image)
    except DockerException:  # e.g. a reference the engine refuses: the plan reports the engine's state
        return None
    return tag if current == base_id else None


def remember_tag(key: str | None, build_plan: BuildPlan) -> None:
    """Remember `build_plan`'s tag under `key`; a cache that cannot be written is simply not used."""
    path = entry_path(key)
    if path is None:
        return
    entry = {"tag": build_plan.tag, "base_image": build_plan.rendered.base_image, "base_id": build_plan.base_id}
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".partial")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(entry, out, sort_keys=True)
            os.replace(partial, path)
        except BaseException:
            os.unlink(partial)
            raise


def entry_path(key: str | None) -> Path | None:
    """Where the entry of `key` lives; None without a key or a user cache folder."""
    folder = user_cache_dir()
    return None if key is None or folder is None else folder / "tags" / f"{key}.json"
