"""The JSONL trace: appended per call, readable after a crash, summarized by the CLI."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.errors import TraceError
from agentbake.gateway.trace import TraceRecord, TraceWriter, load_trace, read_trace, summarize


def record(turn: int, **fields) -> TraceRecord:
    defaults = {"request": {"model": "m"}, "response": {"choices": []}, "upstream_status": 200}
    return TraceRecord(turn=turn, **{**defaults, **fields})


def test_each_record_is_on_disk_as_soon_as_it_is_written(tmp_path):
    path = tmp_path / "sub" / "trace.jsonl"
    writer = TraceWriter(path)
    writer.write(record(0, completion_token_ids=[1, 2], per_token_logps=[-0.1, -0.2]))
    assert read_trace(path)[0].completion_token_ids == [1, 2]  # readable before close: no buffering
    writer.write(record(1, retry_of=0))
    writer.close()
    again = TraceWriter(path)  # a restarted gateway appends
    again.write(record(2))
    again.close()
    assert [r.turn for r in read_trace(path)] == [0, 1, 2]
    assert read_trace(path)[1].retry_of == 0 and read_trace(path)[0].schema_version == 2


def test_a_line_that_holds_no_record_is_skipped_with_a_note_naming_it(tmp_path):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    writer.write(record(0))
    writer.close()
    complete = path.read_bytes()

    def skipped(data: bytes) -> list[tuple[int, str, str]]:
        path.write_bytes(data)
        trace = load_trace(path)
        assert [r.turn for r in trace.records] == [0] and trace.lines == [data.split(b"\n").index(complete[:-1]) + 1]
        return [(s.line, s.code, s.message.removeprefix(f"{path}:")) for s in trace.skipped]

    cut = "the last line is cut (a crash mid-write); one record is lost"
    assert skipped(complete + b'{"turn": 1, "request": {"mod') == [(2, "torn_line", f"2: {cut}")]  # a crash mid-write
    assert skipped(complete + b'{"turn": 1}') == [(2, "torn_line", f"2: {cut}")]  # parseable, but cut all the same
    not_object = "not a JSON object (a torn write?); the line is skipped"
    assert skipped(b"{broken\n" + complete) == [(1, "torn_line", f"1: {not_object}")]
    assert skipped(complete + b"[1, 2]\n\n") == [(2, "torn_line", f"2: {not_object}")]
    assert skipped(complete + b'{"turn": 1}\n') == [
        (2, "malformed_record", "2: not a trace record: missing request, response; the line is skipped")
    ]
    assert skipped(complete + b'{"turn": "1", "request": {}, "response": null}\n') == [
        (2, "malformed_record", "2: `rollout_id` must be a string or null and `turn` an integer; the line is skipped")
    ]
    path.write_bytes(complete + b'{"turn": 1, "schema_version": 99, "request": {}, "response": null}\n')
    with pytest.raises(TraceError, match=r"trace\.jsonl:2: trace record schema_version 99 is not one this agentbake"):
        load_trace(path)
    with pytest.raises(TraceError, match=r"cannot read trace .*missing\.jsonl: No such file"):
        read_trace(tmp_path / "missing.jsonl")


def test_schema_1_records_still_read_without_verdict_or_prefix(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        '{"turn": 0, "request": {}, "response": {"choices": []}, "schema_version": 1, "upstream_status": 200,'
        ' "completion_token_ids": [5], "per_token_logps": [-0.5]}\n'
    )
    (old,) = read_trace(path)
    assert old.schema_version == 1 and old.capture is None and old.prefix is None and old.per_token_logps == [-0.5]
    assert summarize([old]).by_capture == {"unknown": 1}


def test_reader_ignores_fields_from_newer_writers(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"turn": 3, "request": {}, "response": null, "added_later": 1}\n')
    (only,) = read_trace(path)
    assert only.turn == 3 and only.response is None and not only.ok


def test_summary_counts_tokens_errors_and_retries(tmp_path):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    writer.write(record(0, completion_token_ids=[1, 2, 3], rollout_id="a", dialect="anthropic"))
    writer.write(record(1, response=None, upstream_status=500, upstream_error="boom", rollout_id="a"))
    writer.write(record(2, completion_token_ids=[4], retry_of=1, rollout_id="b"))
    writer.write(
        record(
            3,
            rollout_id="b",
            capture={"verdict": "none", "reasons": ["ids missing"]},
            logprobs_mode="raw",
            token_in={"route": "completions", "continues": 2, "new_tokens": 9},
        )
    )
    writer.close()
    summary = summarize(read_trace(path))
    assert (summary.turns, summary.rollouts, summary.tokens) == (4, 2, 4)
    assert (summary.errors, summary.retries, summary.calls_without_ids) == (1, 1, 1)

    result = CliRunner().invoke(main, ["trace", "summary", str(path)])
    assert result.exit_code == 0, result.output
    assert "turns: 4" in result.output and "tokens captured: 4" in result.output
    assert "errors: 1" in result.output and "retries: 1" in result.output
    assert "calls without token ids: 1" in result.output and "dialect anthropic: 1" in result.output
    as_json = CliRunner().invoke(main, ["trace", "summary", "--json", str(path)])
    assert as_json.exit_code == 0 and json.loads(as_json.output) == dataclasses.asdict(summary)
    assert json.loads(as_json.output)["by_dialect"] == {"anthropic": 1, "openai": 3}
    assert json.loads(as_json.output)["by_capture"] == {"none": 1, "unknown": 3}
    assert "capture none: 1" in result.output
    assert json.loads(as_json.output)["by_logprobs_mode"] == {"raw": 1, "unknown": 3}
    assert "logprobs raw: 1" in result.output and "logprobs unknown: 3" in result.output
    assert json.loads(as_json.output)["by_route"] == {"completions": 1, "off": 3}
    assert "route completions: 1" in result.output


def test_the_trace_commands_warn_of_a_skipped_line_and_refuse_an_unknown_schema(tmp_path):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    writer.write(record(0, rollout_id="r"))
    writer.close()
    path.write_bytes(b"nope\n" + path.read_bytes())
    for command in ("summary", "check"):
        result = CliRunner().invoke(main, ["trace", command, str(path)])
        assert result.exit_code == 0, result.output
        assert result.stderr == f"warning: {path}:1: not a JSON object (a torn write?); the line is skipped\n"
    assert "turns: 1\n" in CliRunner().invoke(main, ["trace", "summary", str(path)]).stdout
    path.write_text('{"turn": 0, "schema_version": 3, "request": {}, "response": null}\n')
    result = CliRunner().invoke(main, ["trace", "summary", str(path)])
    assert result.exit_code == 1 and "trace.jsonl:1: trace record schema_version 3 is not one" in result.output


def test_every_record_carries_the_configured_logprobs_mode(make_gateway):
    stamped, unknown = make_gateway(logprobs_mode="processed"), make_gateway()
    for gw in (stamped, unknown):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10).status_code == 200
    assert [r.logprobs_mode for r in stamped.records()] == ["processed"]
    assert [r.logprobs_mode for r in unknown.records()] == [None]
