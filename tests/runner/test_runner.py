"""What the runner reads from a rollout's trace after it ends (`add_trace`): one reading of the file gives the
result's records and notes and sequences.json, the same as `agentbake trace export` and `trace summary` give."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.rollout import SEQUENCES_FILE, TRACE_FILE, add_trace
from tests.export.traces import record


def test_a_bad_middle_line_and_a_cut_last_line_read_the_same_everywhere(tmp_path: Path) -> None:
    lines = [orjson.dumps(record(turn, [1] * (turn + 1), [turn + 2])) + b"\n" for turn in range(3)]
    trace = tmp_path / TRACE_FILE
    # A torn write glued to nothing, a JSON object that is no record, then a gateway killed mid-write.
    trace.write_bytes(lines[0] + b'{"turn": 7, "requ\n' + lines[1] + b'{"turn": 3}\n' + lines[2] + b'{"turn": 4, "re')
    result = RolloutResult("r", "task", Status.OK, 1.0, "img", "claude-code", out_dir=tmp_path)
    add_trace(result, tmp_path, "raw")

    skipped = [
        f"{trace}:2: not a JSON object (a torn write?); the line is skipped",
        f"{trace}:4: not a trace record: missing request, response; the line is skipped",
        f"{trace}:6: the last line is cut (a crash mid-write); one record is lost",
    ]
    assert [r.turn for r in result.trace] == [0, 1, 2] and result.turns == 3
    assert result.notes == [f"trace: {message}" for message in skipped]
    written = json.loads((tmp_path / SEQUENCES_FILE).read_text())
    findings = [f for f in written["validation"]["findings"] if f["code"] in ("torn_line", "malformed_record")]
    assert [(f["message"], f["severity"]) for f in findings] == [(message, "warning") for message in skipped]
    assert [call["turn"] for call in written["calls"]] == [0, 1, 2] and result.trainable is True

    exported = CliRunner().invoke(main, ["trace", "export", str(trace), "--rollout", "r"])
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout) == written  # the file's export, read again by its own reader
    summary = CliRunner().invoke(main, ["trace", "summary", str(trace), "--json"])
    assert json.loads(summary.stdout)["turns"] == 3
    assert summary.stderr.splitlines() == [f"warning: {message}" for message in skipped]


def test_no_trace_no_export(tmp_path: Path) -> None:
    result = RolloutResult("r", "task", Status.OK, 1.0, "img", "oracle", out_dir=tmp_path)
    add_trace(result, tmp_path, "raw")
    assert (result.turns, result.trainable, result.notes) == (0, None, [])
    assert not (tmp_path / SEQUENCES_FILE).exists()
