"""Bad traces, validation findings, determinism and the `agentbake trace export` command."""

from __future__ import annotations

import json
import subprocess
import sys

import orjson
import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.errors import TraceError
from agentbake.export import export, export_rollout, write_rollout_sequences, write_sequences
from tests.export.traces import record, write

CHAIN = [record(0, [1, 2], [3, 4]), record(1, [1, 2, 3, 4, 5], [6])]


def codes(document: dict, severity: str | None = None) -> set[str]:
    return {f["code"] for f in document["validation"]["findings"] if severity in (None, f["severity"])}


def test_same_trace_gives_byte_identical_output(tmp_path):
    trace = write(tmp_path / "t.jsonl", [*CHAIN, record(0, [9], [8], rollout_id="other")])
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_sequences(trace, first)
    write_sequences(trace, second)
    assert first.read_bytes() == second.read_bytes()
    lines = first.read_bytes().splitlines()
    assert [orjson.loads(line)["rollout_id"] for line in lines] == ["r", "other"]
    assert lines[0] == orjson.dumps(orjson.loads(lines[0]), option=orjson.OPT_SORT_KEYS)  # sorted keys


def test_a_torn_last_line_and_a_torn_middle_line_are_findings(tmp_path):
    lines = [orjson.dumps(r) + b"\n" for r in CHAIN]
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(lines[0] + b'{"turn": 7, "requ\n' + lines[1] + b'{"turn": 2, "request": {"mo')
    document = export_rollout(trace, "r")
    torn = [f for f in document["validation"]["findings"] if f["code"] == "torn_line"]
    assert [f["severity"] for f in torn] == ["warning", "warning"]
    assert f"{trace}:2" in torn[0]["message"] and f"{trace}:4" in torn[1]["message"]
    assert document["validation"]["trainable"] is True  # the records that are there are exact
    trace.write_bytes(lines[0][:30] + lines[1])  # a torn write, then a restarted gateway's record on its line
    (glued,) = export_rollout(trace, "r")["validation"]["findings"][:1]
    assert glued["code"] == "torn_line" and f"{trace}:1" in glued["message"]


def test_odd_rollout_ids_and_key_orders_index_like_the_full_parse(tmp_path):
    odd = 'r "quoted" \\ ,"schema_version":1,'
    records = [record(0, [1], [2], rollout_id=odd), record(0, [1], [3], rollout_id=None)]
    reordered = orjson.dumps(record(1, [1, 2], [4], rollout_id=odd), option=orjson.OPT_SORT_KEYS) + b"\n"
    trace = write(tmp_path / "t.jsonl", records, tail=reordered)
    documents = list(export(trace))
    assert [d["rollout_id"] for d in documents] == [odd, None]
    assert [s["turns"] for s in documents[0]["sequences"]] == [[0, 1]]
    spaced = tmp_path / "spaced.jsonl"  # written by another JSON writer: no shortcut applies, same export
    spaced.write_text("".join(json.dumps(r) + "\n" for r in CHAIN))
    assert export_rollout(spaced, "r") == export_rollout(write(tmp_path / "c.jsonl", CHAIN), "r")


def test_an_unknown_schema_version_is_a_clear_error(tmp_path):
    trace = write(tmp_path / "t.jsonl", [CHAIN[0], {**CHAIN[1], "schema_version": 99}])
    with pytest.raises(TraceError, match=r"t\.jsonl:2: trace record schema_version 99 .* upgrade agentbake"):
        export_rollout(trace, "r")
    result = CliRunner().invoke(main, ["trace", "export", str(trace)])
    assert result.exit_code == 1 and "schema_version 99" in result.output and "Traceback" not in result.output


def test_records_of_other_rollouts_are_reported_not_mixed_in(tmp_path):
    trace = write(tmp_path / "t.jsonl", [CHAIN[0], record(0, [1, 2, 3, 4], [7], rollout_id="intruder"), CHAIN[1]])
    document = export_rollout(trace, "r")
    assert [s["turns"] for s in document["sequences"]] == [[0, 1]]
    (foreign,) = [f for f in document["validation"]["findings"] if f["code"] == "foreign_records"]
    assert "'intruder'" in foreign["message"] and foreign["severity"] == "warning"
    missing = export_rollout(trace, "nobody")
    assert codes(missing, "error") == {"no_calls"} and missing["validation"]["trainable"] is False
    result = CliRunner().invoke(main, ["trace", "export", str(trace), "--rollout", "nobody"])
    assert result.exit_code == 1 and "no record of rollout 'nobody'" in result.output and "'intruder'" in result.output


def test_capture_problems_make_the_rollout_untrainable(tmp_path):
    cases = {
        "missing_prompt_ids": [CHAIN[0], record(1, None, [6])],
        "logprob_misalignment": [CHAIN[0], record(1, [1, 2, 3, 4], [6, 7], per_token_logps=[-0.1])],
        "null_logprob": [record(0, [1], [2, 3], per_token_logps=[-0.1, None])],
        "missing_logprobs": [record(0, [1], [2], per_token_logps=[])],
        "capture_partial": [record(0, [1], [2], capture={"verdict": "partial", "reason": "ids missing"})],
        "upstream_error": [record(0, [1], [2], upstream_error="stream cut mid-way", upstream_status=200)],
        "bad_ids": [record(0, ["x"], [2])],
        "logprobs_mode": [record(0, [1], [2], logprobs_mode="processed")],
    }
    for code, records in cases.items():
        document = export_rollout(write(tmp_path / f"{code}.jsonl", records), "r")
        assert code in codes(document, "error"), (code, document["validation"])
        assert document["validation"]["trainable"] is False, code
    stamped = write(tmp_path / "processed.jsonl", [record(0, [1], [2], logprobs_mode="processed")])
    assert export_rollout(stamped, "r", logprobs="processed")["validation"]["trainable"] is True
    unstamped = export_rollout(write(tmp_path / "plain.jsonl", CHAIN), "r")
    assert codes(unstamped) == {"logprobs_mode_unknown"} and unstamped["validation"]["trainable"] is True


def test_retry_of_and_the_ids_must_agree(tmp_path):
    marked_wrong = [record(0, [1], [2]), record(1, [5], [6], retry_of=0)]
    document = export_rollout(write(tmp_path / "a.jsonl", marked_wrong), "r")
    assert "retry_mismatch" in codes(document, "warning")
    unmarked = [record(0, [1], [2]), record(1, [1], [3])]
    document = export_rollout(write(tmp_path / "b.jsonl", unmarked), "r")
    assert "unmarked_retry" in codes(document, "warning")
    assert [s["role"] for s in document["sequences"]] == ["discarded", "agent"]
    continued = [record(0, [1], [2]), record(1, [1, 2], [3]), record(2, [1], [4], retry_of=0)]
    document = export_rollout(write(tmp_path / "c.jsonl", continued), "r")
    assert "retried_call_continued" in codes(document, "warning")


def test_a_failed_call_with_no_answer_is_listed_not_a_sequence(tmp_path):
    busy = record(0, None, [], upstream_status=503, upstream_error="engine busy", per_token_logps=[])
    trace = write(tmp_path / "t.jsonl", [busy, record(1, [1], [2], retry_of=0)])
    document = export_rollout(trace, "r")
    assert [s["turns"] for s in document["sequences"]] == [[1]]
    assert document["calls"][0]["retried"] is True and document["validation"]["trainable"] is True
    alone = export_rollout(write(tmp_path / "u.jsonl", [busy]), "r")
    assert {"failed_call", "no_agent_sequence"} <= codes(alone)


def test_toolless_side_calls_are_auxiliary_and_a_plain_chat_rollout_is_agent(tmp_path):
    side = record(1, [50], [51], request={"model": "m", "messages": []})
    document = export_rollout(write(tmp_path / "t.jsonl", [CHAIN[0], side, {**CHAIN[1], "turn": 2}]), "r")
    assert [(s["turns"], s["role"]) for s in document["sequences"]] == [([1], "auxiliary"), ([0, 2], "agent")]
    chat = export_rollout(write(tmp_path / "c.jsonl", [side]), "r")
    assert [s["role"] for s in chat["sequences"]] == ["agent"]


def test_cli_writes_json_and_trl(tmp_path):
    trace = write(tmp_path / "t.jsonl", CHAIN)
    out = tmp_path / "out" / "sequences.json"
    result = CliRunner().invoke(main, ["trace", "export", str(trace), "--rollout", "r", "--output", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output.splitlines()[-1]) == {
        "calls": 2,
        "errors": 0,
        "rollout_id": "r",
        "sequences": {"agent": 1},
        "trainable": True,
        "warnings": 1,
    }
    document = orjson.loads(out.read_bytes())
    assert document["sequences"][0]["input_ids"] == [1, 2, 3, 4, 5, 6]
    assert document["sequences"][0]["loss_mask"] == [0, 0, 1, 1, 0, 1]
    assert document["sequences"][0]["turn_lengths"] == [2, 2]
    result = CliRunner().invoke(main, ["trace", "export", str(trace), "--format", "trl"])
    trl = orjson.loads(result.stdout_bytes)  # one row of TRL's rollout_func contract (tests/export/test_trl.py)
    assert trl["prompt_ids"] == [1, 2] and trl["completion_ids"] == [3, 4, 5, 6] and trl["env_mask"] == [1, 1, 0, 1]
    assert trl["logprobs"] == [-0.03, -0.04, 0.0, -0.06] and trl["trainable"] is True
    assert list(export(trace)) == [document]
    trl_file = tmp_path / "trl.jsonl"
    result = CliRunner().invoke(main, ["trace", "export", str(trace), "--format", "trl", "--output", str(trl_file)])
    assert result.exit_code == 0 and "r: 2 calls, 1 agent; trainable (0 errors, 1 warnings)" in result.stderr
    assert orjson.loads(trl_file.read_bytes()) == trl


def test_the_gateway_never_imports_the_export():
    code = (
        "import sys, agentbake.gateway, agentbake.gateway.cli;"
        "assert 'agentbake.export' not in sys.modules, 'loaded at start';"
        "from agentbake.gateway import export; from agentbake.export import export as same; assert export is same"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_rollout_gets_its_own_sequences_file(tmp_path):
    trace = write(
        tmp_path / "t.jsonl", [*CHAIN, record(0, [9], [8], rollout_id="b"), record(0, [7], [6], rollout_id=None)]
    )
    summaries = write_rollout_sequences(trace, tmp_path / "out")
    assert [s["rollout_id"] for s in summaries] == ["r", "b", None]
    for name, rollout in (("r", "r"), ("b", "b"), ("_", None)):
        document = orjson.loads((tmp_path / "out" / name / "sequences.json").read_bytes())
        assert document == export_rollout(trace, rollout) | {"validation": document["validation"]}
        assert document["rollout_id"] == rollout
    bad = write(tmp_path / "bad.jsonl", [record(0, [1], [2], rollout_id="..")])
    with pytest.raises(TraceError, match="cannot name a folder"):
        write_rollout_sequences(bad, tmp_path / "out")
