"""Raw or processed logprobs? Read from one prompt sampled at two temperatures.

An importance ratio needs the policy's own logprobs (vLLM's `raw_logprobs`), not those after temperature and top-p.
Where both answers share a context, raw logprobs are equal at both temperatures and processed ones move. Values above 0
are logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentbake.gateway.capture import logprob_of, token_id_of
from agentbake.gateway.preflight_probes import Probe

SampledAs = Literal["raw", "processed", "logits"]

CLAMPED = -9999.0
"""vLLM's stand-in for -inf (and for a token top-k or top-p removed): no value to compare."""
INFORMATIVE = 0.5
"""Only logprobs at least this far below 0 are compared: near-certain tokens stay near 0 either way."""
ABSOLUTE_SLACK = 0.01
RELATIVE_SLACK = 0.05
"""Two logprobs within `ABSOLUTE_SLACK + RELATIVE_SLACK * |larger|` are equal: batch order and low-precision
kernels move raw values a little between calls; temperature moves processed ones by tens of percent."""
LOGIT_SLACK = 1e-4
"""A logprob above this is a logit (a rounding error may put a certain token's logprob at +0.0)."""


@dataclass(frozen=True)
class SamplingEvidence:
    """What two answers to the same prompt at two temperatures say about their logprobs."""

    sampled_as: SampledAs | None
    """"raw", "processed", "logits", or None when the answers cannot tell."""
    compared: int = 0
    """Tokens whose logprob was compared (in both answers at a shared position, far enough from 0)."""
    equal: int = 0
    """Of those, how many had the same logprob at both temperatures."""
    positions: int = 0
    """Positions compared: the answers' common prefix and the first position after it."""
    reason: str = ""
    """Why the answers cannot tell, when `sampled_as` is None; else what showed it."""


def _candidates(entry: object) -> dict[int | str, float]:
    """Token -> logprob at one position: the sampled token and its listed alternatives, clamped ones left out.
    A token is its id, or its text where the server names no id (it refused `return_tokens_as_token_ids`)."""
    if not isinstance(entry, dict):
        return {}
    tops = entry.get("top_logprobs")
    found: dict[int | str, float] = {}
    for item in [*(tops if isinstance(tops, list) else []), entry]:
        token = token_id_of(item)
        token = item.get("token") if token is None and isinstance(item, dict) else token
        logprob = logprob_of(item)
        if isinstance(token, (int, str)) and logprob is not None and logprob > CLAMPED:
            found[token] = logprob
    return found


def _equal(a: float, b: float) -> bool:
    return abs(a - b) <= ABSOLUTE_SLACK + RELATIVE_SLACK * max(abs(a), abs(b))


def compare_sampling(cool: Probe, hot: Probe) -> SamplingEvidence:
    """Compare the logprobs of `cool` and `hot`, the same prompt sampled at a low and a high temperature."""
    temperatures = f"temperature {cool.temperature:g} and {hot.temperature:g}"
    for probe in (cool, hot):
        if probe.error is not None:
            return SamplingEvidence(None, reason=f"the call at temperature {probe.temperature:g} failed: {probe.error}")
        if not probe.capture.logprobs:
            return SamplingEvidence(None, reason=f"the answer at temperature {probe.temperature:g} has no logprobs")
    cool_at, hot_at = ([_candidates(entry) for entry in p.capture.logprobs] for p in (cool, hot))
    above = [v for at in (*cool_at, *hot_at) for v in at.values() if v > LOGIT_SLACK]
    if above:
        return SamplingEvidence("logits", reason=f"values above 0 (up to {max(above):g}) at {temperatures}")
    cool_ids, hot_ids = cool.capture.completion_token_ids, hot.capture.completion_token_ids
    shared = 0
    pairs: list[tuple[float, float]] = []
    for index, (left, right) in enumerate(zip(cool_at, hot_at, strict=False)):
        shared += 1
        pairs += [(left[i], right[i]) for i in left.keys() & right.keys()]
        if index >= min(len(cool_ids), len(hot_ids)) or cool_ids[index] != hot_ids[index]:
            break  # the contexts differ from the next position on
    informative = [(a, b) for a, b in pairs if max(abs(a), abs(b)) >= INFORMATIVE]
    equal = sum(_equal(a, b) for a, b in informative)
    counts = {"compared": len(informative), "equal": equal, "positions": shared}
    if not informative:
        reason = (
            f"the answers at {temperatures} share no token whose logprob is below -{INFORMATIVE:g} "
            f"({len(pairs)} shared at {shared} positions)"
        )
        return SamplingEvidence(None, reason=reason, **counts)
    if equal == len(informative):
        return SamplingEvidence("raw", reason=f"{equal} token logprobs equal at {temperatures}", **counts)
    if equal == 0:
        moved = f"{len(informative)} token logprobs moved between {temperatures}"
        return SamplingEvidence("processed", reason=moved, **counts)
    reason = f"{equal} of {len(informative)} token logprobs equal at {temperatures}, the rest moved"
    return SamplingEvidence(None, reason=reason, **counts)
