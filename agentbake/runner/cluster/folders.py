"""A folder as bytes and back: a task's files shipped to a node, a rollout's folder shipped back.

What comes back was written from a sandbox, so it is unpacked with tarfile's `data` filter.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def pack_folder(folder: Path) -> bytes:
    """Every file and folder under `folder` (links as links, never followed), as an uncompressed tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return buffer.getvalue()


def unpack_folder(data: bytes, folder: Path) -> None:
    """`pack_folder`'s bytes into `folder` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(folder, filter="data")
