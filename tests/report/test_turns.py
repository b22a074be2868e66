"""A trace's records as the report's turns: each text once, however often the requests repeat it."""

from __future__ import annotations

from typing import Any

from agentbake.report.collect import TEXT_CAP, Texts
from agentbake.report.turns import SPARK_POINTS, logprob_summary, turns_of

SYSTEM = "You are a coding agent. " * 20


def record(turn: int, messages: list[dict[str, Any]], reply: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "turn": turn,
        "request": {"messages": messages, "tools": [{"type": "function", "function": {"name": "Bash"}}]},
        "response": {"choices": [{"message": reply}]},
        "completion_tokens": 3,
        "per_token_logps": [-0.5, -1.0, -1.5],
        "prompt_token_ids": list(range(10 + turn)),
        **fields,
    }


def test_each_turn_shows_what_it_adds_once() -> None:
    call = {"id": "c1", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "fix it"}]
    reply = {"role": "assistant", "content": None, "tool_calls": [call]}
    echoed = {"role": "assistant", "content": "", "tool_calls": [call]}  # as the client sends it back
    second = [*first, echoed, {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    texts = Texts()
    turns = turns_of([record(0, first, reply), record(1, second, {"role": "assistant", "content": "done"})], texts)
    assert [m["role"] for m in turns[0]["messages"]] == ["system", "user"]
    assert turns[0]["messages"][0]["text"] == 0 and texts.table == [SYSTEM]  # a long text: one shared copy
    assert turns[0]["completion"]["tool_calls"] == [{"id": "c1", "name": "Bash", "arguments": '{"command": "ls"}'}]
    assert turns[1]["messages"] == [{"role": "tool", "text": "a.py", "tool_call_id": "c1"}]
    assert turns[1]["completion"] == {"role": "assistant", "text": "done"}
    assert (turns[0]["tools"], "tools" in turns[1]) == (["Bash"], False)  # shown when they change
    assert (turns[1]["prompt_tokens"], turns[1]["completion_tokens"]) == (11, 3)
    assert turns[1]["logprobs"] == [-0.5, -1.0, -1.5] and turns[1]["logprob_min"] == -1.5
    turns_of([record(0, first, reply)], texts)  # another rollout, the same system prompt
    assert texts.table == [SYSTEM]


def test_a_failed_call_and_a_long_text() -> None:
    long = "x" * (TEXT_CAP + 5)
    texts = Texts()
    failed = record(0, [{"role": "user", "content": long}], {}, response=None, upstream_status=502)
    failed["upstream_error"] = "upstream answered 502"
    (turn,) = turns_of([failed], texts)
    assert turn["completion"] is None and turn["status"] == 502 and turn["error"] == "upstream answered 502"
    assert texts.table[turn["messages"][0]["text"]].endswith("[5 more characters in the job's files]")


def test_logprobs_unknown_are_left_out_and_long_ones_averaged() -> None:
    assert logprob_summary([None, -1.0, -3.0]) == {"logprobs": [-1.0, -3.0], "logprob_mean": -2.0, "logprob_min": -3.0}
    assert logprob_summary([]) == {} and logprob_summary(None) == {}
    long = logprob_summary([-1.0] * (SPARK_POINTS * 10))
    assert long["logprobs"] == [-1.0] * SPARK_POINTS
