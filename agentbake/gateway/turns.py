"""Turn numbers per rollout, retry detection, and the multi-turn token consistency check.

Claude Code re-sends a failed request with the same content, so such a request is marked a retry. A trainer that
concatenates turns needs each prompt to start with the previous answered call's ids. `prefix_check` tells whether it
does.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import orjson

# Bounded so a long-lived gateway serving many rollouts keeps constant memory: a retry follows its
# original within a few calls (at most 8 subagent calls run at once), and old rollouts are done.
_HISTORY = 32
_ROLLOUTS = 4096


# How the answer is delivered, and capture fields the gateway stops sending to upstreams that reject them.
_NOT_CONTENT = frozenset({"stream", "stream_options", "return_token_ids", "return_tokens_as_token_ids"})


State = TypeVar("State")


def digest(value: Any) -> bytes:
    """A 16-byte digest of a JSON value; key order does not count."""
    return hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


def content_key(body: dict) -> bytes:
    """Digest of a request's content, ignoring how the answer is delivered."""
    return digest({k: v for k, v in body.items() if k not in _NOT_CONTENT})


class PerRollout(Generic[State]):
    """State of the `limit` most recently active rollouts, made on a rollout's first call; the least recent goes
    first, so a long-lived gateway keeps constant memory."""

    def __init__(self, make: Callable[[], State], limit: int) -> None:
        self._make = make
        self._limit = limit
        self._rollouts: OrderedDict[str | None, State] = OrderedDict()

    def of(self, rollout_id: str | None) -> State:
        """The state of `rollout_id`, now its most recently active."""
        state = self._rollouts.get(rollout_id)
        if state is None:
            state = self._rollouts[rollout_id] = self._make()
            if len(self._rollouts) > self._limit:
                self._rollouts.popitem(last=False)
        else:
            self._rollouts.move_to_end(rollout_id)
        return state


@dataclass(slots=True)
class _Rollout:
    next_turn: int = 0
    recent: deque[tuple[bytes, int]] = field(default_factory=lambda: deque(maxlen=_HISTORY))


class TurnBook:
    def __init__(self) -> None:
        self._rollouts = PerRollout(_Rollout, _ROLLOUTS)

    def begin(self, rollout_id: str | None, body: dict) -> tuple[int, int | None]:
        """(turn, retry_of) for a call about to go upstream."""
        rollout = self._rollouts.of(rollout_id)
        key = content_key(body)
        retry_of = next((turn for k, turn in reversed(rollout.recent) if k == key), None)
        turn = rollout.next_turn
        rollout.next_turn += 1
        rollout.recent.append((key, turn))
        return turn, retry_of


# Ids are held for the most recently active rollouts only: the lists the answers were parsed into are kept
# (no copy; about 36 bytes a token) for the latest few answered calls of each.
_ID_ROLLOUTS = 64
_ANSWERED = 3  # enough for a retry chain to fall back on the call before it
_AROUND = 2  # ids shown on each side of a divergence


class Answered(NamedTuple):
    """A call a later one may continue: its turn, prompt ids and completion ids."""

    turn: int
    prompt: list[int]
    completion: list[int]


@dataclass(slots=True)
class _Answers:
    answered: deque[Answered] = field(default_factory=lambda: deque(maxlen=_ANSWERED))
    superseded: deque[int] = field(default_factory=lambda: deque(maxlen=_HISTORY))


class PrefixBook:
    """Per rollout, the answered calls a next call is checked against (see the module docstring)."""

    def __init__(self) -> None:
        self._rollouts = PerRollout(_Answers, _ID_ROLLOUTS)

    def previous(self, rollout_id: str | None, retry_of: int | None) -> Answered | None:
        """The call a call arriving now continues; a retry first drops the call it repeats."""
        answers = self._rollouts.of(rollout_id)
        if retry_of is not None:
            answers.superseded.append(retry_of)
            kept = [a for a in answers.answered if a.turn != retry_of]
            answers.answered.clear()
            answers.answered.extend(kept)
        return answers.answered[-1] if answers.answered else None

    def answered(self, rollout_id: str | None, turn: int, prompt_ids: list[int], completion_ids: list[int]) -> None:
        answers = self._rollouts.of(rollout_id)
        if turn not in answers.superseded:
            answers.answered.append(Answered(turn, prompt_ids, completion_ids))


def first_difference(a: list, b: list) -> int:
    """The first index where two id lists differ (the shorter one's length when one is a prefix of the other)."""
    return next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def prefix_check(previous: Answered | None, prompt_ids: Any) -> dict[str, Any] | None:
    """Whether `prompt_ids` start with `previous`'s prompt + completion ids; None when nothing compares.

    `{"previous_turn", "extends"}`; a break adds `diverged_at`, `diverged_in` (`prompt`: another conversation;
    `completion`: a re-rendered history), and the ids around it as `around`, `expected` and `found`."""
    if previous is None or not isinstance(prompt_ids, list):
        return None
    head, tail = len(previous.prompt), len(previous.prompt) + len(previous.completion)
    # Slice comparisons run in C; this is on every call's path, with prompts of tens of thousands of ids.
    if (
        prompt_ids[:head] == previous.prompt
        and prompt_ids[head:tail] == previous.completion
        and len(prompt_ids) >= tail
    ):
        return {"previous_turn": previous.turn, "extends": True}
    expected = previous.prompt + previous.completion
    at = first_difference(prompt_ids, expected)
    start = max(0, at - _AROUND)
    return {
        "previous_turn": previous.turn,
        "extends": False,
        "diverged_at": at,
        "diverged_in": "prompt" if at < head else "completion",
        "around": start,
        "expected": expected[start : at + _AROUND + 1],
        "found": prompt_ids[start : at + _AROUND + 1],
    }
