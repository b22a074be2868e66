"""The workdir diff's shell helpers, run by the host's own sh (the same POSIX tools a sandbox has)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentbake.runner.harness.workdir import MAX_PRINTED_DIFF_BYTES, print_diff_command, printed_diff


def _printed(path: Path) -> str:
    return subprocess.run(
        ["sh", "-c", print_diff_command(str(path))], capture_output=True, check=True, text=True
    ).stdout


@pytest.mark.parametrize("data", [b"", b"diff --git a/x b/x\n+caf\xe9 \xff\n\\ No newline", bytes(range(256)) * 64])
def test_a_small_diff_is_printed_on_one_line_and_read_back_byte_for_byte(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "workdir.diff").write_bytes(data)
    line = _printed(tmp_path / "workdir.diff")
    assert line.count("\n") == 1 and line.startswith("inline ")
    assert printed_diff(line.rstrip("\n")) == data


def test_a_diff_past_the_printed_size_is_not_printed(tmp_path: Path) -> None:
    (tmp_path / "workdir.diff").write_bytes(b"x" * (MAX_PRINTED_DIFF_BYTES + 1))
    assert _printed(tmp_path / "workdir.diff") == ""
    assert _printed(tmp_path / "missing.diff") == ""  # never fails: the file is read as before


@pytest.mark.parametrize("line", ["inline 5 aGVsbG8", "inline 6 aGVsbG8=", "inline 5 ", "inline", "inline x aGVsbG8="])
def test_a_printed_diff_that_is_not_whole_is_refused(line: str) -> None:
    assert printed_diff(line) is None  # the harness then reads the file
