"""Copying a sandbox's files onto the host: a tar stream parsed as it arrives, written with caps.

What the agent leaves in its sandbox is hostile input. So the archive is never held whole, only regular files and
directories are made, and every name stays inside the destination. One rollout's copies share a `CopyBudget` of bytes
and files; what is cut or left out is said in `CopyBudget.notes`.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

MiB = 1024 * 1024
_BLOCK = MiB
_NAMED_SKIPS = 20
"""Skipped entries named in the notes; more are counted."""


@dataclass
class CopyBudget:
    """What one rollout's copies may still write on the host and read from the sandbox.

    Its collections share it, so the rollout's `out/` folder stays bounded whatever the sandbox holds."""

    bytes: int = 256 * MiB
    """Bytes of file contents still to be written."""
    files: int = 10_000
    """Files and directories still to be created."""
    file_bytes: int = 64 * MiB
    """Bytes kept of any one file; the rest is cut."""
    archive_bytes: int = 1024 * MiB
    """Bytes of archive still to be read from the sandbox, skipped data included."""
    notes: list[str] = field(default_factory=list)
    """What was cut or left out, one line each."""
    _skipped: int = 0

    def note(self, text: str) -> None:
        self.notes.append(text)

    def skip(self, text: str) -> None:
        """An entry left out; the first few are named, the rest counted (`finish`)."""
        self._skipped += 1
        if self._skipped <= _NAMED_SKIPS:
            self.notes.append(text)

    def finish(self) -> list[str]:
        """The notes, with the count of skipped entries that were not named."""
        if self._skipped > _NAMED_SKIPS:
            self.notes.append(f"{self._skipped - _NAMED_SKIPS} more entries left out (links, devices, bad names)")
            self._skipped = _NAMED_SKIPS
        return self.notes


class ArchiveTooLarge(Exception):
    """The archive read from the sandbox passed `CopyBudget.archive_bytes`."""


class ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks, counting what it hands out against the budget."""

    def __init__(self, chunks: Iterable[bytes], budget: CopyBudget) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = memoryview(b"")
        self._budget = budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        if self._budget.archive_bytes <= 0:
            raise ArchiveTooLarge
        size = min(len(buffer), len(self._pending), self._budget.archive_bytes)
        self._budget.archive_bytes -= size
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def extract(chunks: Iterable[bytes], dest: Path, budget: CopyBudget, *, source: str) -> None:
    """Write the tar stream `chunks` of sandbox path `source` under `dest`, within `budget`.

    The archive's first entry is `source` itself: a directory's contents land in `dest`, a file inside it, a link is
    left out. A hard link to a file copied before is a copy of it."""
    dest.mkdir(parents=True, exist_ok=True)
    stream = io.BufferedReader(ChunkReader(chunks, budget), buffer_size=_BLOCK)
    root: str | None = None
    written: dict[str, Path] = {}  # archive name -> the host file made from it
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                if root is None:
                    root = member.name.rstrip("/")
                    if member.isdir():
                        continue  # its contents follow, named root/...
                    if not member.isreg():
                        budget.skip(f"{source}: {_kind(member)}, not collected (links are never followed)")
                        return
                    name, label = posixpath.basename(root), source
                else:
                    name = _inside(member.name, root)
                    label = f"{source}/{name}"
                if name is None:
                    budget.skip(f"{source}: entry {member.name[:200]!r} has a name outside the folder, left out")
                    continue
                if member.isdir():
                    if not _make(dest, name, label, budget, folder=True):
                        return
                elif member.isreg():
                    if not _copy(tar.extractfile(member), member.size, dest, name, label, budget):
                        return
                    written[member.name] = dest / name
                elif member.islnk() and member.linkname in written:
                    with open(written[member.linkname], "rb") as linked:
                        if not _copy(linked, os.fstat(linked.fileno()).st_size, dest, name, label, budget):
                            return
                else:
                    budget.skip(f"{label}: {_kind(member)}, left out")
    except ArchiveTooLarge:
        budget.note(f"{source}: copy stopped after reading the most archive bytes a rollout may read")
    except tarfile.TarError as exc:
        budget.note(f"{source}: copy stopped, the archive is unreadable: {exc}")


def _inside(name: str, root: str) -> str | None:
    """`name` relative to the archive's root entry, or None when it is not under it or climbs out."""
    if not name.startswith(root + "/"):
        return None
    relative = name[len(root) + 1 :].rstrip("/")
    parts = relative.split("/")
    if not relative or "\0" in relative or any(part in ("", ".", "..") for part in parts):
        return None
    return relative


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symlink to {member.linkname[:200]!r}"
    if member.islnk():
        return f"a hard link to {member.linkname[:200]!r}"
    return "a device, FIFO or other special file"


def _make(dest: Path, name: str, label: str, budget: CopyBudget, *, folder: bool) -> int | None:
    """Make directory `dest/name`, or file `dest/name` and its parents, and return the file's descriptor.

    Every directory made counts as a file. None when the budget ends the copy; -1 when the host refuses the name."""
    target = dest / name
    missing = []  # folders the archive never listed are made too, and count: a deep name must not cost nothing
    parent = target.parent
    while parent != dest and not parent.exists():
        missing.append(parent)
        parent = parent.parent
    if budget.files < len(missing) + 1:
        budget.note(f"{label}: copy stopped at the most files a rollout may collect")
        return None
    budget.files -= len(missing) + 1
    try:
        if folder:
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            return -1
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        # O_NOFOLLOW: nothing here creates links, and a name that reaches one anyway is refused, not followed.
        return os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        budget.skip(f"{label}: cannot be created on the host ({exc.strerror}), left out")
        return -1


def _copy(data: IO[bytes] | None, size: int, dest: Path, name: str, label: str, budget: CopyBudget) -> bool:
    """Write file `dest/name` from `data` (`size` bytes), cut at the budget; False when the budget ends the copy."""
    fd = _make(dest, name, label, budget, folder=False)
    if fd is None:
        return False
    if fd < 0:
        return True
    per_file_cut = size > budget.file_bytes
    keep = min(size, budget.file_bytes, budget.bytes)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while written < keep and data is not None:
            block = data.read(min(_BLOCK, keep - written))
            if not block:
                break
            out.write(block)
            written += len(block)
    budget.bytes -= written
    if written < size:
        why = "the per-file cap" if per_file_cut and keep == budget.file_bytes else "the rollout's byte budget"
        budget.note(f"{label}: {size} bytes, cut at {written} ({why})")
    if budget.bytes <= 0:
        budget.note(f"{label}: copy stopped at the most bytes a rollout may collect")
        return False
    return True
