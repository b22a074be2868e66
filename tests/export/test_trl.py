"""`to_trl`: a rollout as one row of TRL's GRPO rollout_func contract, and the rule for several agent sequences."""

from __future__ import annotations

from agentbake.export import export_rollout, to_trl
from tests.export.traces import record, write


def test_a_tool_loop_is_one_completion_with_the_tool_results_masked(tmp_path):
    # call 0 samples [3, 4]; the tool result [5, 6] comes back in call 1's prompt; call 1 samples [7, 8].
    trace = write(tmp_path / "t.jsonl", [record(0, [1, 2], [3, 4]), record(1, [1, 2, 3, 4, 5, 6], [7, 8])])
    row = to_trl(export_rollout(trace, "r"))
    assert row["prompt_ids"] == [1, 2]
    assert row["completion_ids"] == [3, 4, 5, 6, 7, 8]
    assert row["env_mask"] == [1, 1, 0, 0, 1, 1]
    assert row["logprobs"] == [-0.03, -0.04, 0.0, 0.0, -0.07, -0.08]
    assert (row["trainable"], row["agent_sequences"], row["untrained_tokens"], row["rollout_id"]) == (True, 1, 0, "r")


def test_several_agent_sequences_give_the_row_of_the_last_agent_call(tmp_path):
    records = [
        record(0, [1, 2], [3]),  # the main conversation's first call
        record(1, [50, 51], [52, 53, 54]),  # a subagent: its own root, three sampled ids
        record(2, [50, 51, 52, 53, 54, 55], [56]),  # the subagent goes on
        record(3, [1, 2, 3, 4], [5, 6]),  # the main conversation ends the rollout
    ]
    document = export_rollout(write(tmp_path / "t.jsonl", records), "r")
    assert sorted(s["calls"] for s in document["sequences"] if s["role"] == "agent") == [[0, 3], [1, 2]]
    row = to_trl(document)
    assert row["prompt_ids"] == [1, 2] and row["completion_ids"] == [3, 4, 5, 6]
    assert row["env_mask"] == [1, 0, 1, 1]
    assert (row["agent_sequences"], row["untrained_tokens"]) == (2, 4)  # the subagent's 3 + 1 sampled ids


def test_a_compaction_keeps_the_continuation(tmp_path):
    records = [
        record(0, [1, 2], [3, 4, 5]),
        record(1, [1, 2, 3, 4, 5, 6], [7]),
        record(2, [90, 91], [92]),  # after a compaction: a new history, a new root
    ]
    row = to_trl(export_rollout(write(tmp_path / "t.jsonl", records), "r"))
    assert (row["prompt_ids"], row["completion_ids"], row["env_mask"]) == ([90, 91], [92], [1])
    assert row["untrained_tokens"] == 4


def test_a_rollout_without_calls_has_an_empty_untrainable_row(tmp_path):
    trace = write(tmp_path / "t.jsonl", [record(0, [1], [2], rollout_id="other")])
    row = to_trl(export_rollout(trace, "absent"))
    assert row["trainable"] is False and row["agent_sequences"] == 0
    assert row["prompt_ids"] == row["completion_ids"] == row["env_mask"] == row["logprobs"] == []
