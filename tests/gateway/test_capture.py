"""Token ids and logprobs from vLLM payloads, and stripping what the gateway injected."""

from __future__ import annotations

import pytest

from agentbake.gateway.capture import Capture, Injected, strip_injected, token_id_of


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"token": "token_id:42", "logprob": -0.1}, 42),
        ({"token": "hi", "token_id": 7, "logprob": -0.1}, 7),
        ({"token": "token_id:7", "token_id": 9}, 9),
        ({"token": "hi", "logprob": -0.1}, None),
        ({"token": "token_id:abc"}, None),
        ({"token_id": True}, None),
        ("not a dict", None),
    ],
)
def test_token_id_of_both_forms(entry, expected):
    assert token_id_of(entry) == expected


def test_capture_prefers_logprob_ids_and_falls_back_to_choice_token_ids():
    capture = Capture()
    capture.add(
        {
            "prompt_token_ids": [1, 2],
            "choices": [
                {
                    "index": 0,
                    "logprobs": {"content": [{"token": "token_id:5", "logprob": -0.5}]},
                    "token_ids": [5],
                },
                {"index": 1, "logprobs": {"content": [{"token": "token_id:99", "logprob": -9}]}},
            ],
        }
    )
    capture.add({"choices": [{"index": 0, "logprobs": {"content": [{"token": "token_id:6", "logprob": -0.25}]}}]})
    assert capture.completion_token_ids == [5, 6]
    assert capture.per_token_logps == [-0.5, -0.25]
    assert capture.prompt_token_ids == [1, 2]

    text_tokens = Capture()  # a client asked for logprobs itself: text tokens, ids from token_ids
    text_tokens.add({"choices": [{"logprobs": {"content": [{"token": "a", "logprob": 0}]}, "token_ids": [11]}]})
    assert text_tokens.completion_token_ids == [11]


def test_strip_injected_only_removes_what_was_injected():
    def payload():
        return {
            "prompt_token_ids": [1],
            "choices": [{"logprobs": {"content": []}, "token_ids": [2], "delta": {}}],
        }

    everything = payload()
    strip_injected(everything, Injected(logprobs=True, token_ids=True))
    assert everything == {"choices": [{"delta": {}}]}
    logprobs_kept = payload()
    strip_injected(logprobs_kept, Injected(token_ids=True))
    assert logprobs_kept == {"choices": [{"logprobs": {"content": []}, "delta": {}}]}
    untouched = payload()
    strip_injected(untouched, Injected())
    assert untouched == payload()


def _capture(entries: list | None, token_ids: list | None) -> Capture:
    capture = Capture()
    choice: dict = {"index": 0}
    if entries is not None:
        choice["logprobs"] = {"content": entries}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    capture.add({"choices": [choice]})
    return capture


def _entry(token_id: int, logprob: object = -0.5) -> dict:
    return {"token": f"token_id:{token_id}", "logprob": logprob}


@pytest.mark.parametrize(
    ("entries", "token_ids", "error", "verdict", "reason"),
    [
        ([_entry(5), _entry(6, -9999.0)], [5, 6], None, "complete", None),
        ([_entry(5), _entry(6, None)], [5, 6], None, "partial", "null logprobs: 1 of 2"),
        ([_entry(5), {"token": "token_id:6"}], [5, 6], None, "partial", "null logprobs: 1 of 2"),
        ([_entry(5), _entry(6)], [5, 7], None, "partial", "ids disagree at 1: logprob entry 6, token_ids 7"),
        ([_entry(5), _entry(6)], [5], None, "partial", "lengths differ: 2 logprob entries, 1 token_ids"),
        ([_entry(5), {"token": "x", "logprob": -1}], None, None, "none", "ids missing: 1 of 2"),
        (None, [5, 6], None, "partial", "no logprobs"),
        (None, None, None, "none", "ids missing"),
        ([_entry(5)], [5], "upstream stream cut mid-way", "partial", "upstream error"),
        (None, None, "upstream returned 500", "none", "upstream error"),
    ],
)
def test_capture_verdict_names_what_is_wrong(entries, token_ids, error, verdict, reason):
    result = _capture(entries, token_ids).verdict(error)
    assert result["verdict"] == verdict
    if reason is None:
        assert result["reasons"] == []
    else:
        assert any(r.startswith(reason) for r in result["reasons"]), result["reasons"]


def test_logprob_slots_follow_the_ids_and_unknown_is_null_never_zero():
    capture = _capture([_entry(5, -9999.0), _entry(6, None), {"token": "token_id:7"}], [5, 6, 7])
    assert capture.completion_token_ids == [5, 6, 7]
    assert capture.per_token_logps == [-9999.0, None, None]
    short = _capture([{"token": "a", "logprob": -0.1}], [5, 6])  # text tokens: ids from token_ids
    assert short.completion_token_ids == [5, 6] and short.per_token_logps == [-0.1, None]
    assert _capture(None, [5]).per_token_logps == []


def _answer(entry_ids: list[int], token_ids: list[int]) -> dict:
    """A 200 chat completion whose two id sources are given separately (a server bug the record must flag)."""
    entries = [{"token": f"token_id:{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []} for i in entry_ids]
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "x"},
        "logprobs": {"content": entries},
        "finish_reason": "stop",
        "token_ids": token_ids,
    }
    return {"id": "c", "object": "chat.completion", "model": "m", "choices": [choice], "prompt_token_ids": [1]}


@pytest.mark.parametrize(
    ("entry_ids", "token_ids", "reason"),
    [([5, 6], [5, 7], "ids disagree at 1"), ([5, 6], [5], "lengths differ"), ([5], [5, 6], "lengths differ")],
)
def test_a_record_whose_id_sources_disagree_is_partial_end_to_end(gateway, upstream, entry_ids, token_ids, reason):
    import openai

    from agentbake.scripted import Fault

    upstream.fake.script = [Fault(status=200, body=_answer(entry_ids, token_ids))]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
    assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
    (record,) = gateway.records()
    assert record.capture["verdict"] == "partial"
    assert any(r.startswith(reason) for r in record.capture["reasons"]), record.capture
    assert record.completion_token_ids == entry_ids and record.per_token_logps == [-0.5] * len(entry_ids)
