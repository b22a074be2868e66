"""The preflight's checks, each reading the probes' answers.

A check says `ok`, `warn` (capture unaffected), `partial` (samples lack something a trainer may need) or `missing`
(nothing trainable). A new check is one function `(Probes) -> Check` appended to `CHECKS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from agentbake.gateway.preflight_probes import Probe
from agentbake.gateway.preflight_sampling import SamplingEvidence, compare_sampling

Status = Literal["ok", "warn", "partial", "missing"]
Verdict = Literal["capturable", "partial", "not capturable"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


@dataclass
class Probes:
    """Every preflight call, what every check reads."""

    model: str
    unary: Probe
    stream: Probe
    sampling: tuple[Probe, Probe]
    """The same prompt, unary, at each of `SAMPLING_TEMPERATURES` (low first)."""
    configured_logprobs_mode: str | None = None
    """The gateway's `logprobs_mode`: what the operator says the logprobs are; None when not given."""

    @property
    def answered(self) -> list[Probe]:
        return [probe for probe in (self.unary, self.stream) if probe.error is None]

    @property
    def rejected(self) -> list[str]:
        return sorted({name for probe in (self.unary, self.stream, *self.sampling) for name in probe.rejected})

    @cached_property
    def sampling_evidence(self) -> SamplingEvidence:
        return compare_sampling(*self.sampling)


def _modes(probes: list[Probe]) -> str:
    return " and the ".join({"unary": "unary", "stream": "streaming"}[probe.mode] for probe in probes)


def check_answers(probes: Probes) -> Check:
    failed = [p for p in (probes.unary, probes.stream) if p.error is not None]
    if failed:
        return Check("answers", "missing", "; ".join(f"the {p.mode} call failed: {p.error}" for p in failed))
    return Check("answers", "ok", "the unary and the streaming call answered")


def check_logprobs(probes: Probes) -> Check:
    if not probes.answered:
        return Check("logprobs", "missing", "no answer to read logprobs from")
    without = [p for p in probes.answered if not p.capture.logprobs]
    if without:
        return Check(
            "logprobs",
            "missing",
            f"no logprobs in the {_modes(without)} answer: the server ignores `logprobs: true`",
        )
    short = [
        f"{p.mode}: {len(p.capture.logprobs)} entries for {p.completion_tokens} tokens"
        for p in probes.answered
        if p.completion_tokens is not None and p.completion_tokens != len(p.capture.logprobs)
    ]
    if short:
        return Check(
            "logprobs", "partial", "logprob entries do not cover every completion token (" + "; ".join(short) + ")"
        )
    return Check("logprobs", "ok", "one entry per completion token, unary and streaming")


def check_token_ids(probes: Probes) -> Check:
    if not probes.answered:
        return Check("token_ids", "missing", "no answer to read token ids from")
    forms: set[str] = set()
    without: list[Probe] = []
    for probe in probes.answered:
        from_entries = probe.entry_ids
        whole = bool(from_entries) and all(i is not None for i in from_entries)
        if whole:
            keyed = all(isinstance(entry.get("token_id"), int) for entry in probe.capture.logprobs)
            forms.add("`token_id` keys" if keyed else "`token_id:<n>` tokens")
        if probe.capture.choice_token_ids:
            forms.add("`token_ids`")
        if not whole and not probe.capture.choice_token_ids:
            without.append(probe)
    if without:
        return Check(
            "token_ids",
            "missing",
            f"no completion token ids in the {_modes(without)} answer: neither `token_id:<n>` tokens or "
            "`token_id` keys in the logprobs nor `token_ids` (vLLM's `return_tokens_as_token_ids` / "
            "`return_token_ids`); re-tokenized text does not give the ids the model sampled",
        )
    return Check("token_ids", "ok", "as " + " and ".join(sorted(forms)))


def check_records(probes: Probes) -> Check:
    """The capture verdict the gateway's record of each call would carry (ids agreeing, null logprobs, ...)."""
    if not probes.answered:
        return Check("records", "missing", "no answer to record")
    verdicts = {probe.mode: probe.capture.verdict(None) for probe in probes.answered}
    flawed = {mode: v for mode, v in verdicts.items() if v["verdict"] != "complete"}
    if not flawed:
        return Check("records", "ok", "the gateway's records of both calls would be complete")
    status: Status = "missing" if any(v["verdict"] == "none" for v in flawed.values()) else "partial"
    detail = "; ".join(f"{mode}: {v['verdict']} ({', '.join(v['reasons'])})" for mode, v in flawed.items())
    return Check("records", status, f"the gateway's records would be {detail}")


def check_prompt_ids(probes: Probes) -> Check:
    without = [p for p in probes.answered if p.capture.prompt_token_ids is None]
    if not probes.answered or without:
        where = f" in the {_modes(without)} answer" if without else ""
        return Check(
            "prompt_ids",
            "partial",
            f"no `prompt_token_ids`{where}: prompts must be re-tokenized for training and the multi-turn "
            "token check cannot run",
        )
    return Check("prompt_ids", "ok", "`prompt_token_ids` in the unary and the streaming answer")


def check_tool_calls(probes: Probes) -> Check:
    calling = [p for p in probes.answered if p.tool_calls]
    if calling:
        return Check("tool_calls", "ok", f"the offered tool was called in the {_modes(calling)} answer")
    return Check(
        "tool_calls",
        "warn",
        "the model answered without calling the offered tool `ping` (it may still call tools when a task needs them)",
    )


def check_rejected_fields(probes: Probes) -> Check:
    if probes.rejected:
        names = ", ".join(f"`{name}`" for name in probes.rejected)
        return Check("rejected_fields", "warn", f"the server rejects {names}; the gateway sends its calls without")
    return Check("rejected_fields", "ok", "every capture field the gateway sends is accepted")


def check_logprobs_mode(probes: Probes) -> Check:
    """Raw or processed logprobs (vLLM `--logprobs-mode`), against what the gateway was told (`logprobs_mode`)."""
    evidence = probes.sampling_evidence
    configured = probes.configured_logprobs_mode
    if evidence.sampled_as == "logits":
        return Check(
            "logprobs_mode",
            "partial",
            f"the server sends logits, not logprobs ({evidence.reason}: vLLM --logprobs-mode raw_logits or "
            "processed_logits); serve with --logprobs-mode raw_logprobs for importance ratios",
        )
    if evidence.sampled_as is None:
        stamp = (
            f"records are stamped {configured!r} as configured"
            if configured
            else "records say nothing (pass --logprobs-mode raw|processed to stamp them)"
        )
        return Check("logprobs_mode", "warn", f"cannot tell raw from processed logprobs: {evidence.reason}; {stamp}")
    if configured is not None and configured != evidence.sampled_as:
        return Check(
            "logprobs_mode",
            "missing",
            f"the logprobs are {evidence.sampled_as} ({evidence.reason}) but the gateway is told "
            f"--logprobs-mode {configured}: serve vLLM with --logprobs-mode {configured}_logprobs, or pass "
            f"--logprobs-mode {evidence.sampled_as}",
        )
    meaning = "the policy's, before temperature" if evidence.sampled_as == "raw" else "after temperature"
    return Check("logprobs_mode", "ok", f"{evidence.sampled_as} ({meaning}): {evidence.reason}")


CHECKS: list[Callable[[Probes], Check]] = [
    check_answers,
    check_logprobs,
    check_token_ids,
    check_records,
    check_prompt_ids,
    check_tool_calls,
    check_rejected_fields,
    check_logprobs_mode,
]


def verdict_of(checks: list[Check]) -> Verdict:
    statuses = {check.status for check in checks}
    if "missing" in statuses:
        return "not capturable"
    return "partial" if "partial" in statuses else "capturable"
