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
