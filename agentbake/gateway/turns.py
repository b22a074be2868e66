"""Turn numbers per rollout, detection of client retries, and the multi-turn token consistency check.

Claude Code re-sends a failed request with identical content (after a cut stream even as
`"stream": false`), so a request whose content, ignoring the stream flags, equals a recent one of the
same rollout is marked as a retry of it.

Consistency: a trainer that concatenates turns needs each prompt's ids to start with the previous call's
prompt + completion ids. "Previous" is the latest call of the same rollout that had been answered (status
200, prompt and completion ids captured) when this call arrived, and that no later call retried: the
answer the client could have continued from. A retry is compared with what its original was compared
with.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import orjson

# Bounded so a long-lived gateway serving many rollouts keeps constant memory: a retry follows its
# original within a few calls (at most 8 subagent calls run at once), and old rollouts are done.
_HISTORY = 32
_ROLLOUTS = 4096


# How the answer is delivered, and capture fields the gateway stops sending to upstreams that reject them.
_NOT_CONTENT = frozenset({"stream", "stream_options", "return_token_ids", "return_tokens_as_token_ids"})


def content_key(body: dict) -> bytes:
    """Digest of a request's content, ignoring how the answer is delivered."""
    content = {k: v for k, v in body.items() if k not in _NOT_CONTENT}
    return hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


@dataclass(slots=True)
class _Rollout:
    next_turn: int = 0
    recent: deque[tuple[bytes, int]] = field(default_factory=lambda: deque(maxlen=_HISTORY))


class TurnBook:
    def __init__(self) -> None:
        self._rollouts: OrderedDict[str | None, _Rollout] = OrderedDict()

    def begin(self, rollout_id: str | None, body: dict) -> tuple[int, int | None]:
        """(turn, retry_of) for a call about to go upstream."""
        rollout = self._rollouts.get(rollout_id)
        if rollout is None:
            rollout = self._rollouts[rollout_id] = _Rollout()
            if len(self._rollouts) > _ROLLOUTS:
                self._rollouts.popitem(last=False)
        else:
            self._rollouts.move_to_end(rollout_id)
        key = content_key(body)
        retry_of = next((turn for k, turn in reversed(rollout.recent) if k == key), None)
        turn = rollout.next_turn
        rollout.next_turn += 1
        rollout.recent.append((key, turn))
        return turn, retry_of


# Ids are held for the most recently active rollouts only (8 bytes a token of their latest calls).
_ID_ROLLOUTS = 256
_ANSWERED = 3  # enough for a retry chain to fall back on the call before it
_AROUND = 2  # ids shown on each side of a divergence


@dataclass(frozen=True, slots=True)
class Answered:
    """A call a later one may continue: its turn and its prompt + completion ids (packed int64)."""

    turn: int
    prompt_len: int
    ids: array


@dataclass(slots=True)
class _Answers:
    answered: deque[Answered] = field(default_factory=lambda: deque(maxlen=_ANSWERED))
    superseded: deque[int] = field(default_factory=lambda: deque(maxlen=_HISTORY))


class PrefixBook:
    """Per rollout, the answered calls a next call is checked against (see the module docstring)."""

    def __init__(self) -> None:
        self._rollouts: OrderedDict[str | None, _Answers] = OrderedDict()

    def _of(self, rollout_id: str | None) -> _Answers:
        answers = self._rollouts.get(rollout_id)
        if answers is None:
            answers = self._rollouts[rollout_id] = _Answers()
            if len(self._rollouts) > _ID_ROLLOUTS:
                self._rollouts.popitem(last=False)
        else:
            self._rollouts.move_to_end(rollout_id)
        return answers

    def previous(self, rollout_id: str | None, retry_of: int | None) -> Answered | None:
        """The call a call arriving now continues; a retry first drops the call it repeats."""
        answers = self._of(rollout_id)
        if retry_of is not None:
            answers.superseded.append(retry_of)
            kept = [a for a in answers.answered if a.turn != retry_of]
            answers.answered.clear()
            answers.answered.extend(kept)
        return answers.answered[-1] if answers.answered else None

    def answered(self, rollout_id: str | None, turn: int, prompt_ids: list[int], completion_ids: list[int]) -> None:
        answers = self._of(rollout_id)
        if turn in answers.superseded:
            return
        try:
            ids = array("q", prompt_ids)
            ids.extend(completion_ids)
        except (TypeError, OverflowError):
            return  # not ids at all; nothing can be checked against them
        answers.answered.append(Answered(turn, len(prompt_ids), ids))


def common_prefix(a: array, b: array) -> int:
    """Length of the common prefix of two id arrays, by bisection over C-level slice comparisons."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def prefix_check(previous: Answered | None, prompt_ids: Any) -> dict[str, Any] | None:
    """Whether `prompt_ids` start with `previous`'s prompt + completion ids; None when nothing compares.

    `{"previous_turn", "extends"}`, and when it does not extend: `diverged_at` (index into this prompt),
    `diverged_in` ("prompt": a different conversation, e.g. a side call, a subagent or a compaction;
    "completion": the history was re-rendered differently from how it was sampled), `around` (the index of
    the first id shown) and the ids there, `expected` (previous prompt + completion) and `found` (this prompt).
    """
    if previous is None or not isinstance(prompt_ids, list):
        return None
    try:
        prompt = array("q", prompt_ids)
    except (TypeError, OverflowError):
        return None
    expected = previous.ids
    if len(prompt) >= len(expected) and prompt[: len(expected)] == expected:
        return {"previous_turn": previous.turn, "extends": True}
    at = common_prefix(prompt, expected)
    start = max(0, at - _AROUND)
    return {
        "previous_turn": previous.turn,
        "extends": False,
        "diverged_at": at,
        "diverged_in": "prompt" if at < previous.prompt_len else "completion",
        "around": start,
        "expected": expected[start : at + _AROUND + 1].tolist(),
        "found": prompt[start : at + _AROUND + 1].tolist(),
    }
