"""Token ids and logprobs from vLLM answers, exactly as the server produced them.

Ids are read, never re-derived from text: re-tokenizing gives different ids than the model sampled
(KL spikes in training). vLLM gives them in two forms: a `token_id` key, or with
`--return-tokens-as-token-ids` / `return_tokens_as_token_ids` inside the token string as
`"token_id:<int>"`. With `return_token_ids` it also lists them per choice (`token_ids`) and for the
prompt (`prompt_token_ids`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    if isinstance(value, int) and not isinstance(value, bool):
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
        ids = [token_id_of(entry) for entry in self.logprobs]
        if ids and all(i is not None for i in ids):
            return ids  # type: ignore[return-value]
        return list(self.choice_token_ids)

    @property
    def per_token_logps(self) -> list[float]:
        return [float(e.get("logprob", 0.0)) for e in self.logprobs if isinstance(e, dict)]


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
