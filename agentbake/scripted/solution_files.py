"""The task's `solution/` folder, handed to the steps as the oracle gets it.

The scripted model reaches the sandbox only through the agent's shell tool, so the first step places the files at
`/solution` itself. They go as a reproducible gzip'd tar in base64, only when there is more than solve.sh.
"""

from __future__ import annotations

import base64
import gzip
import io
import shlex
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SOLUTION_DIR = "/solution"
"""Where the oracle finds the task's solution/ (Harbor's path), so where the first step puts it."""
ARCHIVE_MAX = 64 * 1024
"""Largest gzip'd tar (bytes) the first step carries: its base64 (~87 KB) keeps the step's command well under
Linux's 128 KiB limit on one exec argument, which is how the agents hand a command to their shell."""
FILES_READ_MAX = 16 * ARCHIVE_MAX
"""Files whose sizes total more than this are not read at all: they could not compress under `ARCHIVE_MAX`."""


@dataclass(frozen=True)
class SolutionFile:
    """One file of solution/: its bytes and the mode the oracle's upload gives it."""

    data: bytes
    mode: int


@dataclass(frozen=True)
class SolutionFiles:
    """The files of solution/ to place (path relative to it -> file), or why they are left out."""

    files: Mapping[str, SolutionFile]
    too_large: str | None = None
    """How large the files are when they exceed the cap (so are not placed, and the first step says so)."""


def read_solution_files(folder: Path) -> SolutionFiles:
    """Every file under `folder` (solve.sh too) when it holds more than solve.sh; none otherwise."""
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    if all(p == folder / "solve.sh" for p in paths):
        return SolutionFiles({})
    total = sum(p.stat().st_size for p in paths)
    if total > FILES_READ_MAX:
        return SolutionFiles({}, f"{len(paths)} files, {_kib(total)} before compression")
    files = {p.relative_to(folder).as_posix(): SolutionFile(p.read_bytes(), _oracle_mode(p)) for p in paths}
    size = len(solution_archive(files))
    if size > ARCHIVE_MAX:
        return SolutionFiles({}, f"{len(files)} files, {_kib(size)} as a tar.gz")
    return SolutionFiles(files)


def _oracle_mode(path: Path) -> int:
    """The mode the oracle's /solution gives the file: its own within 0755 (the upload's mask), then `chmod a+rX`."""
    mode = path.stat().st_mode & 0o755
    return mode | 0o444 | (0o111 if mode & 0o111 else 0)


def _kib(size: int) -> str:
    """A byte count as KiB, rounded up, for messages."""
    return f"{-(-size // 1024)} KiB"


def solution_archive(files: Mapping[str, SolutionFile]) -> bytes:
    """A gzip'd tar of `files` with their directories (0755), sorted, owner 0, every time 0: reproducible bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in _with_directories(files):
            info = tarfile.TarInfo(name)
            info.uid = info.gid = info.mtime = 0
            info.uname = info.gname = ""
            if name in files:
                info.size, info.mode = len(files[name].data), files[name].mode
                tar.addfile(info, io.BytesIO(files[name].data))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    return gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)


def _with_directories(files: Mapping[str, SolutionFile]) -> list[str]:
    """The files' names and those of the directories holding them, sorted (a directory before its contents)."""
    names = set(files)
    for name in files:
        parts = name.split("/")
        names.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
    return sorted(names)


def placing_lines(solution: SolutionFiles, label: str, target: str = SOLUTION_DIR) -> list[str]:
    """Shell lines placing the files at `target`, or saying why not on stderr, never failing the command.

    The message starts with `label`."""
    if solution.too_large is not None:
        said = (
            f"{label}: the solution/ files ({solution.too_large}) exceed the {_kib(ARCHIVE_MAX)} cap of the scripted "
            f"model, so they are not placed at {target}; the steps that read them may fail"
        )
        return [f"echo {shlex.quote(said)} >&2"]
    if not solution.files:
        return []
    encoded = base64.encodebytes(solution_archive(solution.files)).decode()
    failed = f"{label}: could not place the solution/ files at {target}; the steps that read them may fail"
    quoted, end = shlex.quote(target), heredoc_delimiter(encoded)
    unpack = f"mkdir -p -- {quoted} && base64 -d <<'{end}' | tar -xzmf - -C {quoted} || echo {shlex.quote(failed)} >&2"
    return [f"{unpack}\n{encoded}{end}"]


def heredoc_delimiter(text: str) -> str:
    """A here-document delimiter that no line of `text` is."""
    delimiter = "AGENTBAKE_END"
    lines = set(text.splitlines())
    while delimiter in lines:
        delimiter += "_"
    return delimiter
