"""Turn numbers per rollout and detection of client retries.

Claude Code re-sends a failed request with identical content (after a cut stream even as
`"stream": false`), so a request whose content, ignoring the stream flags, equals a recent one of the
same rollout is marked as a retry of it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field

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
