"""Turn numbering per rollout and retry detection."""

from __future__ import annotations

from agentbake.gateway.turns import TurnBook


def test_identical_content_is_a_retry_whatever_the_stream_flag():
    book = TurnBook()
    body = {"model": "m", "messages": [{"role": "user", "content": "a"}]}
    assert book.begin("r", {**body, "stream": True, "stream_options": {"include_usage": True}}) == (0, None)
    assert book.begin("r", {**body, "stream": False}) == (1, 0)
    assert book.begin("r", body) == (2, 1)  # the latest identical call is the one repeated
    assert book.begin("r", {**body, "max_tokens": 5}) == (3, None)
    assert book.begin("other", body) == (0, None)  # rollouts are independent
    assert book.begin(None, body) == (0, None)
