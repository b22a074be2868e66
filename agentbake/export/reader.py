"""Reading a trace by rollout in bounded memory: one indexing pass, then one rollout at a time.

Pass 1 keeps only each line's offset and length per rollout. Pass 2 reads one rollout back and keeps its ids as JSON
text (`b"1,2,3,"`), so prefix checks are `bytes.startswith` and no ints are built. Memory follows the largest
rollout, never the file. File order is causal: the gateway writes a call's record before its client gets the answer.
Which lines hold no record is the gateway's rule (`trace.skip_reason`).
"""

from __future__ import annotations

import math
import os
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from agentbake.errors import TraceError
from agentbake.export.findings import Finding
from agentbake.gateway.trace import SkippedLine, Trace, is_int, parse_line, skip_reason

ALL_ROLLOUTS = object()
"""`rollout_ids` value meaning every rollout of the trace."""


@dataclass(slots=True)
class Call:
    """One recorded call, as the graph needs it."""

    index: int
    """Position among the rollout's records, in file order."""
    line: int
    """Line number in the trace file, from 1 (for messages)."""
    turn: int
    tokens: bytes = b""
    """Prompt ids then completion ids as id text: each id in decimal followed by a comma."""
    prompt_end: int = 0
    """Where the prompt's ids end in `tokens` (bytes)."""
    prompt_len: int | None = None
    """Number of prompt ids; None when the record carries none."""
    completion_len: int = 0
    length: int = 0
    """Number of ids in `tokens`."""
    logprobs: list[float | None] = field(default_factory=list)
    tools: bool = False
    """The request offered tools."""
    retry_of: int | None = None
    ok: bool = False
    error: str | None = None
    finish_reason: str | None = None
    capture: str | None = None
    """The record's capture verdict ("complete" / "partial" / "none") when the trace has one."""
    capture_reason: str | None = None
    logprobs_mode: str | None = None
    """"raw" or "processed" when the gateway's preflight stamped it on the record."""
    worker: str | None = None
    """The upstream worker that answered, when the record names it."""
    policy_version: int | None = None
    """The policy version the record was stamped with, when the trainer set one."""
    problems: list[Finding] = field(default_factory=list)
    """What is wrong with this record's ids or logprobs."""
    parent: int | None = None
    children: list[int] = field(default_factory=list)

    @property
    def prompt(self) -> bytes:
        return self.tokens[: self.prompt_end]

    def ids(self) -> list[int]:
        return parse_ids(self.tokens)


def id_text(ids: list[int]) -> bytes:
    """The id text of a list of ints (canonical: as orjson writes them, each followed by a comma)."""
    return orjson.dumps(ids)[1:-1] + b"," if ids else b""


def parse_ids(text: bytes) -> list[int]:
    return orjson.loads(b"[" + text[:-1] + b"]") if text else []


@dataclass(slots=True)
class TraceIndex:
    """Where each rollout's records are, and what pass 1 found wrong with the file itself."""

    path: Path
    lines: dict[str | None, list[tuple[int, int, int]]] = field(default_factory=dict)
    """rollout id -> (line number, byte offset, byte length) of its records, in file order."""
    skipped: list[SkippedLine] = field(default_factory=list)
    """Lines that hold no record: their rollout is unknown, so every exported rollout reports them."""


def index_trace(path: str | os.PathLike[str]) -> TraceIndex:
    """Pass 1: the offsets of every rollout's records. Raises TraceError for an unreadable file or a record of
    a schema version this agentbake does not know; a line that holds no record is skipped with a note."""
    index = TraceIndex(Path(path))
    offset = 0
    with _open(index.path) as file:
        for number, line in enumerate(file, start=1):
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            keys = fast_keys(line)  # a line as the gateway writes it: its other fields are checked in pass 2
            raw = keys or parse_line(line)
            skipped = skip_reason(index.path, number, line, raw, whole=keys is None)
            if skipped is not None:  # always so when raw is None
                index.skipped.append(skipped)
                continue
            index.lines.setdefault(raw.get("rollout_id"), []).append((number, start, len(line)))
    return index


def read_calls(index: TraceIndex, rollout_id: str | None) -> tuple[list[Call], list[SkippedLine]]:
    """Pass 2: one rollout's calls in file order, and its lines that hold no record when read whole."""
    calls: list[Call] = []
    skipped: list[SkippedLine] = []
    with _open(index.path) as file:
        for number, start, length in index.lines.get(rollout_id, []):
            file.seek(start)
            line = file.read(length)
            raw, prompt = _parse_record(line)
            reason = skip_reason(index.path, number, line, raw)
            if reason is not None:
                skipped.append(reason)
                continue
            calls.append(to_call(raw, len(calls), number, prompt))
    return calls, skipped


def calls_of(trace: Trace, rollout_id: str | None) -> list[Call]:
    """One rollout's calls from a trace already read whole, as `read_calls` makes them from the file."""
    mine = [
        (raw, line) for raw, line in zip(trace.fields, trace.lines, strict=True) if raw.get("rollout_id") == rollout_id
    ]
    return [to_call(raw, position, line) for position, (raw, line) in enumerate(mine)]


def skipped_findings(skipped: list[SkippedLine]) -> list[Finding]:
    """The lines that hold no record as the export's findings, in file order (warnings: a lost record only
    masks more tokens)."""
    return [Finding(s.code, s.message, severity="warning") for s in sorted(skipped, key=lambda s: s.line)]


def to_call(raw: dict[str, Any], position: int, line: int, prompt_text: bytes | None = None) -> Call:
    """The graph's view of one record; what is malformed becomes a problem of the call."""
    request = raw.get("request") if isinstance(raw.get("request"), dict) else {}
    retry_of = raw.get("retry_of")
    capture = raw.get("capture")
    call = Call(
        index=position,
        line=line,
        turn=raw["turn"],
        tools=bool(request.get("tools")),
        retry_of=retry_of if is_int(retry_of) else None,
        ok=raw.get("upstream_status") == 200 and raw.get("upstream_error") is None,
        error=raw.get("upstream_error") if isinstance(raw.get("upstream_error"), str) else None,
        finish_reason=raw.get("finish_reason") if isinstance(raw.get("finish_reason"), str) else None,
        logprobs_mode=raw.get("logprobs_mode") if isinstance(raw.get("logprobs_mode"), str) else None,
        worker=raw.get("worker") if isinstance(raw.get("worker"), str) else None,
        policy_version=raw.get("policy_version") if is_int(raw.get("policy_version")) else None,
    )
    if isinstance(capture, dict):
        reasons = capture.get("reasons")
        reason = "; ".join(map(str, reasons)) if isinstance(reasons, list) and reasons else capture.get("reason")
        call.capture, call.capture_reason = capture.get("verdict"), reason
    elif isinstance(capture, str):
        call.capture = capture
    completion = _ids(raw.get("completion_token_ids"))
    if completion is None:
        call.problems.append(Finding("bad_ids", "`completion_token_ids` is not a list of integers"))
        completion = []
    if prompt_text is None:
        prompt = _ids(raw.get("prompt_token_ids"))
        if raw.get("prompt_token_ids") is not None and prompt is None:
            call.problems.append(Finding("bad_ids", "`prompt_token_ids` is not a list of integers"))
        prompt_text = None if prompt is None else id_text(prompt)
    call.completion_len = len(completion)
    if prompt_text is not None:
        call.prompt_len = prompt_text.count(b",")
        call.prompt_end = len(prompt_text)
        call.tokens = prompt_text + id_text(completion)
        call.length = call.prompt_len + len(completion)
    call.logprobs = _logprobs(raw.get("per_token_logps"))
    return call


def iter_rollouts(
    index: TraceIndex, rollout_ids: object = ALL_ROLLOUTS
) -> Iterator[tuple[str | None, list[Call], list[Finding]]]:
    """(rollout id, its calls, its findings) for the chosen rollouts, every one by default."""
    chosen = list(index.lines) if rollout_ids is ALL_ROLLOUTS else list(rollout_ids)  # type: ignore[call-overload]
    for rollout in chosen:
        calls, skipped = read_calls(index, rollout)
        yield rollout, calls, skipped_findings([*index.skipped, *skipped])


# The gateway writes a record's fields in TraceRecord order: `turn` first, and `schema_version`,
# `rollout_id` side by side at the top level, so pass 1 reads them without parsing the whole line (a line
# written otherwise is parsed in full). Pass 2 parses every record it exports in full anyway.
_TURN = re.compile(rb'\{"turn":(-?\d+),')
_ROLLOUT = re.compile(rb',"schema_version":(-?\d+),"rollout_id":(null|"(?:[^"\\]|\\.)*")[,}]')


def fast_keys(line: bytes) -> dict | None:
    """`turn`, `schema_version` and `rollout_id` of a line the gateway wrote, or None for any other line."""
    turn = _TURN.match(line)
    keys = _ROLLOUT.search(line, turn.end()) if turn else None
    if keys is None:
        return None
    rollout = orjson.loads(keys.group(2))
    return {"turn": int(turn.group(1)), "schema_version": int(keys.group(1)), "rollout_id": rollout}  # type: ignore[union-attr]


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}; expected a gateway trace (JSONL) file") from exc


_PROMPT_KEY = b',"prompt_token_ids":['
_DIGITS = b"0123456789,"


def _parse_record(line: bytes) -> tuple[dict | None, bytes | None]:
    """A record with its prompt ids cut out as id text (None when the line does not hold them as the gateway writes
    them)."""
    start = line.rfind(_PROMPT_KEY)  # the last one: the top-level key (a JSON string cannot hold a bare `"`)
    if start >= 0:
        begin = start + len(_PROMPT_KEY)
        end = line.find(b"]", begin)
        if end >= 0 and _is_id_text(line[begin:end]):
            raw = parse_line(line[:start] + b',"prompt_token_ids":null' + line[end + 1 :])
            return raw, (line[begin:end] + b"," if end > begin else b"")
    return parse_line(line), None


def _is_id_text(text: bytes) -> bool:
    """Non-negative decimal ids separated by single commas (or nothing), checked at C speed."""
    return (
        not text.translate(None, _DIGITS)
        and b",," not in text
        and not text.startswith(b",")
        and not text.endswith(b",")
    )


def _ids(value: Any) -> list[int] | None:
    if not isinstance(value, list):
        return None
    try:
        array("q", value)  # every item an int (in C; a bool would pass, no writer sends one)
    except (TypeError, OverflowError):
        return None
    return value


def _logprobs(values: Any) -> list[float | None]:
    if not isinstance(values, list):
        return []
    try:
        return array("d", values).tolist()  # all numbers (JSON has no NaN): the common case, in C
    except TypeError:
        return [_logprob(value) for value in values]


def _logprob(value: Any) -> float | None:
    """A logprob as recorded; null, NaN or a non-number are "unknown" (None), never 0.0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)
