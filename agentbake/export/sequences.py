"""One rollout's calls -> its training document: the graph, one sequence per root-to-leaf path, validation.

A path's `input_ids` are its leaf's prompt + completion ids: earlier calls sit inside at the same positions, so
nothing is concatenated. `loss_mask` is 1 exactly on sampled ids; `logprobs` holds theirs and null elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from agentbake.export.findings import Finding
from agentbake.export.graph import check_retries, link, paths
from agentbake.export.reader import Call
from agentbake.gateway.config import LogprobsMode

FORMAT = "agentbake.sequences/1"
Role = Literal["agent", "auxiliary", "discarded"]


def build_document(
    rollout_id: str | None,
    calls: Sequence[Call],
    *,
    logprobs: LogprobsMode = "raw",
    trace_findings: Iterable[Finding] = (),
) -> dict:
    """The export document of one rollout (see the package README for every key)."""
    rollout: list[Finding] = list(trace_findings)
    if not calls:
        rollout.append(Finding("no_calls", f"the trace holds no record of rollout {rollout_id!r}"))
    rollout += link(calls)
    superseded, retry_findings = check_retries(calls)
    rollout += retry_findings
    rollout += _unplaced(calls, superseded)
    rollout += _logprobs_mode(calls, logprobs)
    per_call = {call.index: _quality(call) for call in calls}

    offered_tools = any(call.tools for call in calls)
    sequences, sequence_findings = [], []
    for number, path in enumerate(paths(calls)):
        role = _role(path, superseded, offered_tools)
        found = [f for call in path for f in per_call[call.index]]
        sequence_findings += [f.as_dict(number) for f in found]
        sequence = _sequence(path, role)
        sequence["trainable"] = role != "discarded" and not any(f.severity == "error" for f in found)
        sequences.append(sequence)
    agent = [s for s in sequences if s["role"] == "agent"]
    if calls and not agent:
        rollout.append(
            Finding(
                "no_agent_sequence",
                "no path of this rollout is an agent sequence (every one is auxiliary or discarded)",
            )
        )
    trainable = bool(agent) and all(s["trainable"] for s in agent) and not any(f.severity == "error" for f in rollout)
    return {
        "calls": [_call(call, superseded) for call in calls],
        "format": FORMAT,
        "logprobs": logprobs,
        "rollout_id": rollout_id,
        "sequences": sequences,
        "validation": {
            "findings": [f.as_dict() for f in rollout] + sequence_findings,
            "trainable": trainable,
        },
    }


def _role(path: list[Call], superseded: set[int], offered_tools: bool) -> Role:
    if path[-1].index in superseded:
        return "discarded"
    # In a rollout where no call offered tools (plain chat), every path is the agent's.
    if offered_tools and not any(call.tools for call in path):
        return "auxiliary"
    return "agent"


def _sequence(path: list[Call], role: Role) -> dict:
    leaf = path[-1]
    input_ids = leaf.ids()
    mask = [0] * len(input_ids)
    logprobs: list[float | None] = [None] * len(input_ids)
    turn_lengths, end = [], path[0].prompt_len or 0
    for call in path:
        start = call.prompt_len or 0
        stop = start + call.completion_len
        mask[start:stop] = [1] * call.completion_len
        values = call.logprobs[: call.completion_len]
        logprobs[start:stop] = values + [None] * (call.completion_len - len(values))
        turn_lengths.append(stop - end)
        end = stop
    return {
        "calls": [call.index for call in path],
        "input_ids": input_ids,
        "logprobs": logprobs,
        "loss_mask": mask,
        "prompt_len": path[0].prompt_len,
        "role": role,
        "turn_lengths": turn_lengths,
        "turns": [call.turn for call in path],
    }


def _quality(call: Call) -> list[Finding]:
    """What is wrong with a call a sequence trains on (its ids, logprobs, capture)."""
    found = [problem.at(call.turn) for problem in call.problems]

    def add(code: str, message: str) -> None:
        found.append(Finding(code, f"turn {call.turn}: {message}", turn=call.turn))

    if not call.ok:
        add("upstream_error", f"the call failed ({call.error or 'no successful answer'}); its ids may be partial")
    if call.ok and not call.completion_len:
        add("missing_completion_ids", "no completion ids were captured (start the gateway with token ids on)")
    if call.capture not in (None, "complete"):
        add(
            "capture_partial",
            f"capture verdict {call.capture!r}" + (f": {call.capture_reason}" if call.capture_reason else ""),
        )
    if call.completion_len:
        if not call.logprobs:
            add("missing_logprobs", "no logprobs were captured (the gateway ran with --no-logprobs?)")
        elif len(call.logprobs) != call.completion_len:
            add("logprob_misalignment", f"{len(call.logprobs)} logprobs for {call.completion_len} completion ids")
        unknown = call.logprobs.count(None)
        if unknown:
            add("null_logprob", f"{unknown} sampled token(s) have an unknown (null/NaN) logprob")
    return found


def _unplaced(calls: Sequence[Call], superseded: set[int]) -> list[Finding]:
    """Calls without prompt ids: not in any sequence, each labelled here."""
    found = []
    for call in calls:
        if call.prompt_len is not None:
            continue
        found += [problem.at(call.turn) for problem in call.problems]
        if call.ok:
            found.append(
                Finding(
                    "missing_prompt_ids",
                    f"turn {call.turn} answered but its prompt ids were not captured (the upstream ignored"
                    " `return_token_ids`): it cannot be placed in the graph, and its sampled ids are lost",
                    turn=call.turn,
                )
            )
        elif call.index not in superseded:
            found.append(
                Finding(
                    "failed_call",
                    f"turn {call.turn} failed ({call.error or 'no answer'}) and was not retried",
                    severity="warning",
                    turn=call.turn,
                )
            )
    return found


def _logprobs_mode(calls: Sequence[Call], wanted: LogprobsMode) -> list[Finding]:
    modes = {call.logprobs_mode for call in calls if call.completion_len}
    found = []
    wrong = sorted(m for m in modes if m is not None and m != wanted)
    if wrong:
        found.append(
            Finding(
                "logprobs_mode",
                f"the records' logprobs are {', '.join(wrong)}, not {wanted} as asked: a trainer would compute wrong"
                f" importance ratios (serve with vLLM --logprobs-mode {wanted}_logprobs, or export with"
                f" --logprobs {wrong[0]})",
            )
        )
    if None in modes:
        found.append(
            Finding(
                "logprobs_mode_unknown",
                "some records do not say whether their logprobs are raw or processed (no preflight stamp);"
                f" assumed {wanted}",
                severity="warning",
            )
        )
    return found


def _call(call: Call, superseded: set[int]) -> dict:
    return {
        "children": call.children,
        "completion_len": call.completion_len,
        "finish_reason": call.finish_reason,
        "index": call.index,
        "ok": call.ok,
        "parent": call.parent,
        "policy_version": call.policy_version,
        "prompt_len": call.prompt_len,
        "retried": call.index in superseded,
        "retry_of": call.retry_of,
        "tools": call.tools,
        "turn": call.turn,
        "worker": call.worker,
    }
