"""copyout.extract over real tar streams (made by tarfile, fed in small chunks as an engine sends them): only
files and directories under the destination are made, within the budget, and each thing left out is a note."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from agentbake.runner.sandbox.copyout import CopyBudget, extract

MiB = 1024 * 1024


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o4755  # setuid: never carried to the host
    if data is not None:
        info.size = len(data)
    return info, data


def _chunks(data: bytes, size: int = 4096) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _tree(root: Path) -> dict[str, str]:
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file" if path.is_file() else "other"
            found[str(path.relative_to(root))] = kind
    return found


def test_a_folder_copies_its_files_and_dirs_only_never_links_devices_or_escapes(tmp_path: Path) -> None:
    archive = _archive(
        _entry("logs", tarfile.DIRTYPE),
        _entry("logs/a.txt", data=b"hello"),
        _entry("logs/sub", tarfile.DIRTYPE),
        _entry("logs/sub/b.txt", data=b"deep"),
        _entry("logs/abs", tarfile.SYMTYPE, link="/etc/passwd"),
        _entry("logs/rel", tarfile.SYMTYPE, link="a.txt"),
        _entry("logs/hard", tarfile.LNKTYPE, link="logs/a.txt"),
        _entry("logs/hard-elsewhere", tarfile.LNKTYPE, link="etc/shadow"),
        _entry("logs/fifo", tarfile.FIFOTYPE),
        _entry("logs/null", tarfile.CHRTYPE),
        _entry("logs/../escape.txt", data=b"out"),
        _entry("/etc/evil", data=b"abs"),
        _entry("other/x", data=b"not under the root"),
        _entry("logs/after.txt", data=b"still copied"),
    )
    budget = CopyBudget()
    dest = tmp_path / "out"
    extract(_chunks(archive), dest, budget, source="/home/agent/logs")
    assert _tree(dest) == {"a.txt": "file", "sub": "dir", "sub/b.txt": "file", "hard": "file", "after.txt": "file"}
    assert (dest / "a.txt").read_bytes() == b"hello" and (dest / "after.txt").read_bytes() == b"still copied"
    assert (dest / "hard").read_bytes() == b"hello"  # a hard link to a file copied before: a copy of it
    assert (dest / "a.txt").stat().st_mode & 0o7777 == 0o644  # no setuid, no exec bit from the sandbox
    assert not (tmp_path / "escape.txt").exists()
    notes = "\n".join(budget.finish())
    assert "/home/agent/logs/abs: a symlink to '/etc/passwd', left out" in notes
    assert "/home/agent/logs/hard-elsewhere: a hard link to 'etc/shadow', left out" in notes
    assert "/home/agent/logs/fifo: a device, FIFO or other special file, left out" in notes
    assert "entry 'logs/../escape.txt' has a name outside the folder" in notes and "'/etc/evil'" in notes


def test_the_path_itself_a_link_is_not_followed_and_a_file_lands_inside_dest(tmp_path: Path) -> None:
    budget = CopyBudget()
    extract(_chunks(_archive(_entry("logs", tarfile.SYMTYPE, link="/"))), tmp_path / "a", budget, source="/x/logs")
    assert _tree(tmp_path / "a") == {}
    assert budget.finish() == ["/x/logs: a symlink to '/', not collected (links are never followed)"]
    extract(_chunks(_archive(_entry("run.log", data=b"line\n"))), tmp_path / "b", budget, source="/x/run.log")
    assert (tmp_path / "b" / "run.log").read_bytes() == b"line\n"


def test_sizes_files_and_the_archive_read_stay_within_the_budget(tmp_path: Path) -> None:
    big = b"z" * (3 * MiB)
    archive = _archive(
        _entry("logs", tarfile.DIRTYPE),
        _entry("logs/big.bin", data=big),
        _entry("logs/small.txt", data=b"kept"),
        *[_entry(f"logs/many/{i}", data=b"x") for i in range(50)],
    )
    budget = CopyBudget(bytes=8 * MiB, files=20, file_bytes=1 * MiB)
    extract(_chunks(archive, 65536), tmp_path / "out", budget, source="/logs")
    assert (tmp_path / "out" / "big.bin").stat().st_size == MiB and (tmp_path / "out" / "small.txt").exists()
    assert len(_tree(tmp_path / "out")) == 20 and budget.files == 0
    notes = budget.finish()
    assert f"/logs/big.bin: {3 * MiB} bytes, cut at {MiB} (the per-file cap)" in notes
    assert any("copy stopped at the most files a rollout may collect" in note for note in notes)

    budget = CopyBudget(bytes=2 * MiB + 10, file_bytes=4 * MiB)
    extract(_chunks(archive, 65536), tmp_path / "bytes", budget, source="/logs")
    assert (tmp_path / "bytes" / "big.bin").stat().st_size == 2 * MiB + 10 and budget.bytes == 0
    assert f"/logs/big.bin: {3 * MiB} bytes, cut at {2 * MiB + 10} (the rollout's byte budget)" in budget.notes

    # A huge file past the per-file cap is skipped by reading it: the archive budget stops that read.
    budget = CopyBudget(file_bytes=MiB, archive_bytes=2 * MiB)
    extract(_chunks(archive, 65536), tmp_path / "archive", budget, source="/logs")
    assert _tree(tmp_path / "archive") == {"big.bin": "file"}
    assert "/logs: copy stopped after reading the most archive bytes a rollout may read" in budget.notes


def test_many_skipped_entries_are_counted_not_listed(tmp_path: Path) -> None:
    links = [_entry(f"d/l{i}", tarfile.SYMTYPE, link="/") for i in range(500)]
    archive = _archive(_entry("d", tarfile.DIRTYPE), *links)
    budget = CopyBudget()
    extract(_chunks(archive), tmp_path, budget, source="/d")
    notes = budget.finish()
    assert len(notes) == 21 and notes[-1] == "480 more entries left out (links, devices, bad names)"


def test_an_unreadable_archive_is_a_note(tmp_path: Path) -> None:
    budget = CopyBudget()
    archive = _archive(_entry("d", tarfile.DIRTYPE), _entry("d/a", data=b"a" * 10000))
    extract(_chunks(archive[:1500]), tmp_path, budget, source="/d")  # cut mid-file, as a dying engine does
    assert budget.notes and "copy stopped, the archive is unreadable" in budget.notes[-1]
