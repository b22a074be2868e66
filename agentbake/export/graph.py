"""The token-prefix graph of one rollout's calls, built from the ids the server reported, never from text.

A call's parent is the latest earlier call whose prompt + completion ids are the longest prefix of its prompt ids. A
call that extends none is a root (the first call, a subagent, a compaction). Comparing ids means re-serialised tool
arguments never break a link, and a template that re-renders history always does (`broken_prefix`).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Sequence

from agentbake.export.findings import Finding
from agentbake.export.reader import Call, parse_ids


def link(calls: Sequence[Call]) -> list[Finding]:
    """Set `parent` and `children` of every call; return the rollout-level findings of the graph."""
    findings: list[Finding] = []
    # Parents by length, longest first, then latest first: the first that matches is the one.
    candidates: list[Call] = []
    for call in calls:
        if call.prompt_len is not None:
            parent = next(
                (c for c in candidates if c.length <= call.prompt_len and call.tokens.startswith(c.tokens)), None
            )
            if parent is not None:
                call.parent = parent.index
                parent.children.append(call.index)
            broken = _broken_prefix(call, candidates, parent)
            if broken is not None:
                findings.append(broken)
        if call.prompt_len is not None and call.completion_len:
            insort(candidates, call, key=lambda c: (-c.length, -c.index))
    return findings


def _broken_prefix(call: Call, candidates: list[Call], parent: Call | None) -> Finding | None:
    """A call that repeats an earlier prompt, then diverges inside what that call sampled: the history was re-rendered
    (a template stripping reasoning). A new path starts here; the trainer should know."""
    floor = parent.length if parent is not None else 0
    prompt = call.prompt
    for earlier in candidates:  # longest first: past the parent's length none can qualify
        if earlier.length <= floor:
            break
        head = earlier.prompt_end
        if earlier is parent or earlier.prompt_len <= floor or len(prompt) <= head:  # type: ignore[operator]
            continue
        if not prompt.startswith(memoryview(earlier.tokens)[:head]):
            continue
        at = common_prefix(prompt, earlier.tokens)
        if at < earlier.length:
            sampled = earlier.ids()[at : at + 4]
            seen = parse_ids(prompt)[at : at + 4]
            return Finding(
                "broken_prefix",
                f"turn {call.turn}'s prompt repeats turn {earlier.turn}'s prompt but diverges at index {at}, inside"
                f" the ids turn {earlier.turn} sampled (sampled {sampled}, prompt has {seen}): the history was"
                " re-rendered differently from how it was generated, so the sequence restarts here",
                severity="warning",
                turn=call.turn,
            )
    return None


def common_prefix(a: bytes, b: bytes) -> int:
    """How many ids two id texts share at their start (bisection on bytes, then whole ids only)."""
    low, high = 0, min(len(a), len(b))
    view = memoryview(b)
    while low < high:
        middle = (low + high + 1) // 2
        if a.startswith(view[:middle]):
            low = middle
        else:
            high = middle - 1
    return a.count(b",", 0, low)


def check_retries(calls: Sequence[Call]) -> tuple[set[int], list[Finding]]:
    """The calls a retry superseded, and where `retry_of` and the ids disagree. A call with a later twin (same parent,
    same prompt) that never continued is a retry even unmarked."""
    findings: list[Finding] = []
    superseded: set[int] = set()
    latest: dict[int, Call] = {}
    by_prompt: dict[tuple[int | None, bytes], Call] = {}
    for call in calls:
        if call.turn in latest:
            findings.append(
                Finding(
                    "duplicate_turn",
                    f"turn {call.turn} appears twice (line {latest[call.turn].line} and {call.line}): a gateway"
                    " restarted on the same trace? `retry_of` then names the latest such turn",
                    severity="warning",
                    turn=call.turn,
                )
            )
        if call.retry_of is not None:
            original = latest.get(call.retry_of)
            if original is None:
                findings.append(
                    Finding(
                        "unknown_retry",
                        f"turn {call.turn} is marked as a retry of turn {call.retry_of}, which is not in the trace",
                        severity="warning",
                        turn=call.turn,
                    )
                )
            else:
                superseded.add(original.index)
                findings += _disagreement(call, original)
        if call.prompt_len is not None:
            key = (call.parent, call.prompt)
            twin = by_prompt.get(key)
            if twin is not None and not twin.children and twin.index not in superseded and call.retry_of != twin.turn:
                superseded.add(twin.index)
                findings.append(
                    Finding(
                        "unmarked_retry",
                        f"turn {call.turn} has the same prompt ids as turn {twin.turn}, which never continued, but"
                        f" is not marked `retry_of` it: turn {twin.turn} is treated as a discarded attempt",
                        severity="warning",
                        turn=twin.turn,
                    )
                )
            by_prompt[key] = call
        latest[call.turn] = call
    return superseded, findings


def _disagreement(retry: Call, original: Call) -> list[Finding]:
    findings = []
    if retry.prompt_len is not None and original.prompt_len is not None:
        mine, theirs = retry.prompt, original.prompt
        if mine != theirs:
            at = common_prefix(mine, theirs)
            findings.append(
                Finding(
                    "retry_mismatch",
                    f"turn {retry.turn} is marked as a retry of turn {original.turn}, but their prompt ids differ"
                    f" from index {at}: they are not the same call",
                    severity="warning",
                    turn=retry.turn,
                )
            )
    if original.children:
        findings.append(
            Finding(
                "retried_call_continued",
                f"turn {original.turn} was retried by turn {retry.turn}, yet a later call extends turn"
                f" {original.turn}'s answer: the client went on with the answer it retried",
                severity="warning",
                turn=original.turn,
            )
        )
    return findings


def paths(calls: Sequence[Call]) -> list[list[Call]]:
    """Every root-to-leaf path of the graph, in order of the leaf's position."""
    out = []
    for call in calls:
        if call.prompt_len is None or call.children:
            continue
        path = [call]
        while path[-1].parent is not None:
            path.append(calls[path[-1].parent])
        out.append(path[::-1])
    return out
