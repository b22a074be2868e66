"""Validation findings: what an export found wrong, where, and whether it blocks training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a trainer should know. An `error` on an agent sequence or the rollout makes it untrainable;
    a `warning` does not (the sequences stay exact, e.g. a lost record only masks more tokens)."""

    code: str
    """Stable name: torn_line, malformed_record, bad_ids, missing_prompt_ids, missing_completion_ids,
    missing_logprobs, logprob_misalignment, null_logprob, capture_partial, upstream_error, broken_prefix,
    retry_mismatch, retried_call_continued, unmarked_retry, unknown_retry, duplicate_turn, failed_call,
    foreign_records, no_calls, no_agent_sequence, logprobs_mode, logprobs_mode_unknown."""
    message: str
    severity: Severity = "error"
    turn: int | None = None
    """The call at fault, when there is one."""

    def at(self, turn: int) -> Finding:
        return Finding(self.code, self.message, self.severity, turn)

    def as_dict(self, sequence: int | None = None) -> dict:
        return {
            "code": self.code,
            "message": self.message,
            "severity": self.severity,
            "turn": self.turn,
            "sequence": sequence,
        }
