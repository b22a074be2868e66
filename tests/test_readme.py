"""The README's examples marked `<!-- tested -->` run as written, in order, in one folder, in a fresh venv holding
only the wheel (tests/conftest.py); its install lines name the wheel this version builds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import agentbake
from agentbake.buildkit.catalog import builtin_root
from tests.conftest import outside

README = (builtin_root() / "README.md").read_text()
MARKED = re.compile(r"^<!-- tested -->\n```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _commands(block: str) -> list[str]:
    """A shell block's commands: one per line, without its trailing comment (none of them quotes a `#`)."""
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_install_lines_name_this_version() -> None:
    assert set(re.findall(r"agentbake-(\d[\w.]*?)(?:\.tar\.gz|-py3)", README)) == {agentbake.__version__}


@pytest.mark.docker
def test_the_marked_examples_run_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    blocks = MARKED.findall(README)
    assert [language for language, _ in blocks] == ["sh", "python", "python"]
    printed = []
    for language, block in blocks:
        if language == "sh":
            for command in _commands(block):
                done = outside(venv, "bash", "-c", command, cwd=tmp_path)
                assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
                printed.append(done.stdout)
        else:
            (tmp_path / "example.py").write_text(block)
            done = outside(venv, str(venv / "bin/python"), "example.py", cwd=tmp_path)
            assert done.returncode == 0, f"{block}\n{done.stderr}"
            printed.append(done.stdout)
    # The two `agentbake run` lines: the oracle's run, then the real Claude Code's against the scripted model.
    results = sorted((json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/result.json")), key=len)
    assert sorted((r["task"], r["status"], r["reward"], r["agent"]) for r in results) == [
        ("write-file", "ok", 1.0, "claude-code"),
        ("write-file", "ok", 1.0, "oracle"),
    ]
    assert printed[4] == (builtin_root() / "docs/remote.md").read_text()
    assert printed[5] == (builtin_root() / "agentbake/trl/README.md").read_text()
    # The Python loop: each task's line (task, status, reward, model calls captured).
    rows = sorted(line.split() for line in printed[6].splitlines())
    assert [row[:3] for row in rows] == [["fix-failing-test", "ok", "1.0"], ["write-file", "ok", "1.0"]]
    assert all(int(row[3]) > 0 for row in rows)
    assert printed[7].split()[1] == "True"  # the build kit's example: the tag, cached
