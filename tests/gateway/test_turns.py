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


def test_prefix_check_against_the_previous_answered_call_not_a_retried_one():
    from agentbake.gateway.turns import PrefixBook, prefix_check

    book = PrefixBook()
    assert book.previous("r", None) is None
    book.answered("r", 0, [1, 2], [3, 4])
    previous = book.previous("r", None)
    assert prefix_check(previous, [1, 2, 3, 4, 9]) == {"previous_turn": 0, "extends": True}
    broken = prefix_check(previous, [1, 2, 3, 8, 9])
    assert broken == {
        "previous_turn": 0,
        "extends": False,
        "diverged_at": 3,
        "diverged_in": "completion",
        "around": 1,
        "expected": [2, 3, 4],
        "found": [2, 3, 8, 9],
    }
    assert prefix_check(previous, [7, 2])["diverged_in"] == "prompt"
    assert prefix_check(previous, None) is None
    book.answered("r", 1, [1, 2, 3, 4, 9], [10])
    # turn 2 retries turn 1: it is compared with what turn 1 was compared with (turn 0) ...
    assert book.previous("r", 1).turn == 0
    book.answered("r", 1, [1, 2, 3, 4, 9], [10])  # ... and a late answer of the retried call is ignored
    book.answered("r", 2, [1, 2, 3, 4, 9], [11])
    assert book.previous("r", None).turn == 2 and book.previous("other", None) is None
