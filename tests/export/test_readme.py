"""The README's trainer loop runs on an exported trace."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

from agentbake.export import write_sequences
from tests.export.traces import record, write

README = Path(__file__).resolve().parents[2] / "agentbake" / "export" / "README.md"


def test_the_trainer_loop_of_the_readme_runs(tmp_path, capsys, monkeypatch):
    trace = write(tmp_path / "t.jsonl", [record(0, [1, 2], [3, 4]), record(1, [1, 2, 3, 4, 5], [6])])
    write_sequences(trace, tmp_path / "sequences.jsonl")
    loop = re.search(r"## A trainer loop.*?```python\n(.*?)```", README.read_text(), re.S).group(1)
    script = tmp_path / "loop.py"
    script.write_text(loop)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script))
    assert "batch of 1: 3 sampled tokens, loss" in capsys.readouterr().out
