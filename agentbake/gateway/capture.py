"""Token ids and logprobs from vLLM answers, exactly as the server produced them.

Ids are read, never re-derived from text: re-tokenizing can give other ids than the model sampled. vLLM sends them as a
`token_id` key or as `"token_id:<int>"` tokens, and lists them per choice with `return_token_ids`.

Logprobs are kept as sent, `-9999.0` included. A null or absent value is recorded as null, never 0.0 (which would claim
probability 1), and makes the capture verdict partial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

_PREFIX = "token_id:"


def choices_of(payload: dict) -> list[dict]:
    """The choice objects of a completion or chunk; whatever else a broken server sends is skipped."""
    choices = payload.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def token_id_of(entry: Any) -> int | None:
    """The id of one logprob entry in either form, or None when it carries none."""
    if not isinstance(entry, dict):
        return None
    value = entry.get("token_id")
    if _is_int(value):
        return value
    token = entry.get("token")
    if isinstance(token, str) and token.startswith(_PREFIX):
        try:
            return int(token[len(_PREFIX) :])
        except ValueError:
            return None
    return None


@dataclass(slots=True)
class Capture:
    """What one upstream call yielded for training, accumulated over a unary answer or a stream."""

    logprobs: list[dict] = field(default_factory=list)
    """Raw logprob entries of choice 0 (`logprobs.content`), in order."""
    choice_token_ids: list[int] = field(default_factory=list)
    """Choice 0's `token_ids` (vLLM `return_token_ids`), in order."""
    prompt_token_ids: list[int] | None = None

    def add(self, payload: dict) -> None:
        """Take what a chat completion or a streamed chunk carries."""
        prompt = payload.get("prompt_token_ids")
        if isinstance(prompt, list):
            self.prompt_token_ids = prompt
        for choice in choices_of(payload):
            if choice.get("index", 0) != 0:
                continue
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
                self.logprobs.extend(logprobs["content"])
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                self.choice_token_ids.extend(ids)

    @property
    def completion_token_ids(self) -> list[int]:
        """Ids from the logprob entries when every entry has one, else the choice's `token_ids`."""
        return self.result(None).completion_token_ids

    @property
    def per_token_logps(self) -> list[float | None]:
        """One slot per completion id, in order: the entry's logprob, or None where none was sent.

        Empty when no logprobs came."""
        return self.result(None).per_token_logps

    def result(self, upstream_error: str | None) -> Captured:
        """Ids, logprob slots and verdict of the call, in one pass (this runs on every call's record)."""
        entries = self.logprobs
        entry_ids = [token_id_of(entry) for entry in entries]
        missing = entry_ids.count(None)
        choice_ids = self.choice_token_ids
        if entry_ids and not missing:
            ids: list[int] = entry_ids  # type: ignore[assignment]
        else:
            ids = [i for i in choice_ids if _is_int(i)]
        logps: list[float | None] = []
        if entries:
            logps = [logprob_of(entry) for entry in entries[: len(ids)]]
            logps += [None] * (len(ids) - len(logps))
        reasons: list[str] = []
        if upstream_error is not None:
            reasons.append("upstream error")
        if not ids:
            reasons.append("ids missing")
        elif not entries:
            reasons.append("no logprobs")
        if missing and missing < len(entry_ids):
            reasons.append(f"ids missing: {missing} of {len(entry_ids)} logprob entries carry no id")
        if entries and choice_ids:
            if len(entries) != len(choice_ids):
                reasons.append(f"lengths differ: {len(entries)} logprob entries, {len(choice_ids)} token_ids")
            elif missing < len(entry_ids) and entry_ids != choice_ids:
                at = next(n for n, (a, b) in enumerate(zip(entry_ids, choice_ids, strict=True)) if a != b)
                if entry_ids[at] is not None:
                    reasons.append(f"ids disagree at {at}: logprob entry {entry_ids[at]}, token_ids {choice_ids[at]}")
        unknown = logps.count(None)
        if unknown:
            reasons.append(f"null logprobs: {unknown} of {len(ids)}")
        verdict = "none" if not ids else ("partial" if reasons else "complete")
        return Captured(ids, logps, {"verdict": verdict, "reasons": reasons})

    def verdict(self, upstream_error: str | None) -> dict[str, Any]:
        """`{"verdict": "complete" | "partial" | "none", "reasons": [...]}` for the record of this call."""
        return self.result(upstream_error).verdict


class Captured(NamedTuple):
    completion_token_ids: list[int]
    per_token_logps: list[float | None]
    verdict: dict[str, Any]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def logprob_of(entry: Any) -> float | None:
    """The logprob of one entry as sent (-9999.0 included); None when it is null, absent or not a number."""
    value = entry.get("logprob") if isinstance(entry, dict) else None
    if _is_int(value) or isinstance(value, float):
        return float(value) if value == value else None  # NaN (from a lenient JSON parser) is unknown
    return None


@dataclass(frozen=True, slots=True)
class Injected:
    """Which capture fields the gateway added to a request, so they can be removed from the answer."""

    logprobs: bool = False
    token_ids: bool = False
    usage: bool = False
    extensions: tuple[str, ...] = ()
    """vLLM-only request fields added (an upstream that rejects them gets the call again without)."""


def strip_injected(payload: dict, injected: Injected) -> None:
    """Remove from a completion or chunk (in place) what only the gateway asked for."""
    if injected.token_ids:
        payload.pop("prompt_token_ids", None)
        payload.pop("prompt_logprobs", None)
    for choice in choices_of(payload):
        if injected.logprobs:
            choice.pop("logprobs", None)
        if injected.token_ids:
            choice.pop("token_ids", None)
