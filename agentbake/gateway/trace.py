"""The JSONL trace: one record per upstream call, written as the call ends, read back typed.

Each record is one `os.write` of a whole line on an O_APPEND descriptor. A crash keeps every finished call, and
concurrent calls never interleave. Every reader follows `skip_reason`: a line holding no record is skipped with a note,
an unknown schema version is refused.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentbake.errors import TraceError

SCHEMA_VERSION = 2
"""2 added `capture` and `prefix`, and writes an unknown logprob as null (1 wrote 0.0 or failed); records of
version 1 still read, with both fields None."""


@dataclass(slots=True, kw_only=True)
class TraceRecord:
    """One upstream call. Field names up to `timestamp` are the ones existing trainers read."""

    turn: int
    """Position of the call within its rollout, from 0, in the order requests arrived."""
    request: dict[str, Any]
    """The chat-completions request as sent upstream (after translation and rewriting)."""
    response: dict[str, Any] | None
    """The upstream's answer in chat-completions form (a stream is assembled), logprobs moved out;
    None when the call failed before an answer."""
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    """Raw logprob entries of the completion (`choices[0].logprobs.content`)."""
    completion_tokens: int = 0
    """Completion tokens: the number of captured ids, or the upstream's usage count when none were."""
    completion_token_ids: list[int] = field(default_factory=list)
    """Completion token ids exactly as the upstream reported them."""
    per_token_logps: list[float | None] = field(default_factory=list)
    """Logprob of each completion token, one slot per id of `completion_token_ids`, as sent (vLLM's -9999.0
    for `-inf` kept); null where the upstream sent none (NaN, a fallback entry). Empty without logprobs."""
    finish_reason: str | None = None
    """The upstream's finish_reason (None if the stream ended without one or the call failed)."""
    latency_s: float = 0.0
    """Seconds from sending the call upstream to the end of its answer."""
    timestamp: float = 0.0
    """Unix time the call was sent upstream."""
    schema_version: int = SCHEMA_VERSION
    rollout_id: str | None = None
    """From the `/r/<rollout_id>/` path prefix, or None."""
    dialect: str = "openai"
    """The API the client spoke: "openai" (chat completions), "anthropic" (messages, translated), "responses"
    (OpenAI's Responses API, translated) or "google" (Gemini's generateContent, translated)."""
    prompt_token_ids: list[int] | None = None
    """Prompt token ids when the upstream returned them (vLLM `return_token_ids`)."""
    upstream_status: int | None = None
    """HTTP status of the upstream answer; None when no answer arrived (refused, timed out)."""
    upstream_error: str | None = None
    """What went wrong, if anything: error body, timeout, stream cut mid-way, malformed SSE lines."""
    retry_of: int | None = None
    """Turn of an earlier call with identical content that this call repeats (a client retry); a
    trainer keeps the last call of such a chain."""
    capture: dict[str, Any] | None = None
    """`{"verdict": "complete" | "partial" | "none", "reasons": [...]}`: whether ids and logprobs are whole
    (README.md, "What each record holds"); None in records before schema 2."""
    prefix: dict[str, Any] | None = None
    """Multi-turn token consistency: whether `prompt_token_ids` start with the previous call's prompt +
    completion ids (README.md, "What each record holds"); None when there is nothing to compare."""
    logprobs_mode: str | None = None
    """"raw" or "processed": what the upstream's logprobs are (the gateway's `logprobs_mode`); None when unknown."""
    token_in: dict[str, Any] | None = None
    """The call's route with token-in on: `{"route": "completions", "continues": <turn>, "new_tokens": <n>}` or
    `{"route": "chat", "reason": ...}`. None with token-in off (README.md, "Token-in continuation")."""

    worker: str | None = None
    """The upstream worker that answered (the gateway's `worker`: one of a runner's several); None when unnamed."""
    policy_version: int | None = None
    """The policy version the upstream served when the call was sent (the gateway's, set by the trainer)."""

    @property
    def ok(self) -> bool:
        return self.upstream_error is None and self.upstream_status == 200


_FIELDS = frozenset(f.name for f in dataclasses.fields(TraceRecord))
_REQUIRED = frozenset(
    f.name
    for f in dataclasses.fields(TraceRecord)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


class TraceWriter:
    """Appends records to a JSONL file; safe to share between coroutines of one event loop."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        """Bytes in the file: what it held when opened and what this writer appended."""

    def write(self, record: TraceRecord) -> None:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        written = os.write(self._fd, line)
        while written < len(line):  # a short write on a full disk or a signal; finish the line
            written += os.write(self._fd, line[written:])
        self.size += written

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A line of a trace file that holds no record: every reader skips it and says so with `message`."""

    line: int
    """Line number in the file, from 1."""
    code: str
    """`torn_line` (cut, or not a JSON object: a torn write) or `malformed_record` (a JSON object, not a record)."""
    message: str
    """`<file>:<line>: what is wrong; the line is skipped`."""


def skip_reason(
    path: str | os.PathLike[str], number: int, line: bytes, raw: dict[str, Any] | None, *, whole: bool = True
) -> SkippedLine | None:
    """Why line `number` of `path` holds no record, or None when it holds one.

    `raw` is the parsed line (None when not a JSON object). With `whole=False` it holds only the fields a reader takes
    without parsing the line. Raises TraceError for an unknown schema version."""
    where = f"{path}:{number}"
    if not line.endswith(b"\n"):  # every record is written with its newline in one write
        return SkippedLine(
            number, "torn_line", f"{where}: the last line is cut (a crash mid-write); one record is lost"
        )
    if raw is None:
        return SkippedLine(number, "torn_line", f"{where}: not a JSON object (a torn write?); the line is skipped")
    _check_schema(raw, where)
    rollout = raw.get("rollout_id")
    if not (rollout is None or isinstance(rollout, str)) or not is_int(raw.get("turn")):
        return SkippedLine(
            number,
            "malformed_record",
            f"{where}: `rollout_id` must be a string or null and `turn` an integer; the line is skipped",
        )
    missing = _REQUIRED - raw.keys() if whole else ()
    if missing:
        return SkippedLine(
            number,
            "malformed_record",
            f"{where}: not a trace record: missing {', '.join(sorted(missing))}; the line is skipped",
        )
    return None


def _check_schema(raw: dict[str, Any], where: str) -> None:
    """Refuse a record of a schema version this agentbake does not read (TraceError naming `where`)."""
    version = raw.get("schema_version", 1)
    if not is_int(version) or not 1 <= version <= SCHEMA_VERSION:
        raise TraceError(
            f"{where}: trace record schema_version {version!r} is not one this agentbake reads (1 to {SCHEMA_VERSION});"
            " export it with the agentbake that wrote it, or upgrade agentbake"
        )


def parse_line(line: bytes) -> dict[str, Any] | None:
    """A line as a JSON object, or None when it is not one."""
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return raw if isinstance(raw, dict) else None


@dataclass(slots=True)
class Trace:
    """A trace file read whole: its records in file order and the lines it skipped."""

    path: Path
    records: list[TraceRecord] = field(default_factory=list)
    fields: list[dict[str, Any]] = field(default_factory=list)
    """Each record's fields as its line holds them (absent keys absent): what the training export reads."""
    lines: list[int] = field(default_factory=list)
    """Each record's line number."""
    skipped: list[SkippedLine] = field(default_factory=list)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Every record of a trace file, with the lines it skips (`skip_reason`). Raises TraceError for an unreadable
    file or an unknown schema version."""
    trace = Trace(Path(path))
    try:
        with trace.path.open("rb") as file:
            for number, line in enumerate(file, start=1):
                if not line.strip():
                    continue
                raw = parse_line(line)
                skipped = skip_reason(trace.path, number, line, raw)
                if skipped is not None:  # always so when raw is None
                    trace.skipped.append(skipped)
                    continue
                trace.fields.append(raw)
                trace.records.append(TraceRecord(**{k: v for k, v in raw.items() if k in _FIELDS}))
                trace.lines.append(number)
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}; expected a gateway trace (JSONL) file") from exc
    return trace


def read_trace(path: str | os.PathLike[str]) -> list[TraceRecord]:
    """The records of a trace file (`load_trace`, without the notes of the lines it skipped)."""
    return load_trace(path).records


def is_int(value: Any) -> bool:
    """An int of JSON's, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(slots=True)
class TraceSummary:
    """Totals over a trace, as printed by `agentbake trace summary`."""

    turns: int = 0
    rollouts: int = 0
    tokens: int = 0
    calls_without_ids: int = 0
    errors: int = 0
    retries: int = 0
    by_dialect: dict[str, int] = field(default_factory=dict)
    by_capture: dict[str, int] = field(default_factory=dict)
    """Records per capture verdict ("complete", "partial", "none"; "unknown" for records before schema 2)."""
    by_logprobs_mode: dict[str, int] = field(default_factory=dict)
    """Records per logprobs mode stamped on them ("raw", "processed"; "unknown" without a stamp)."""
    by_route: dict[str, int] = field(default_factory=dict)
    """Records per token-in route ("completions", "chat"; "off" for records of a gateway with token-in off)."""


def summarize(records: list[TraceRecord]) -> TraceSummary:
    summary = TraceSummary(turns=len(records))
    summary.rollouts = len({r.rollout_id for r in records})
    for record in records:
        summary.tokens += len(record.completion_token_ids)
        summary.errors += not record.ok
        summary.retries += record.retry_of is not None
        summary.calls_without_ids += record.ok and not record.completion_token_ids
        summary.by_dialect[record.dialect] = summary.by_dialect.get(record.dialect, 0) + 1
        verdict = str((record.capture or {}).get("verdict", "unknown"))
        summary.by_capture[verdict] = summary.by_capture.get(verdict, 0) + 1
        mode = record.logprobs_mode or "unknown"
        summary.by_logprobs_mode[mode] = summary.by_logprobs_mode.get(mode, 0) + 1
        route = str((record.token_in or {}).get("route", "off"))
        summary.by_route[route] = summary.by_route.get(route, 0) + 1
    return summary


@dataclass(slots=True)
class RolloutCheck:
    """Multi-turn token consistency of one rollout, as printed by `agentbake trace check`."""

    rollout_id: str | None
    calls: int = 0
    checked: int = 0
    """Records compared with a previous call (see `TraceRecord.prefix`)."""
    extends: int = 0
    """Prompts that start with the previous call's prompt + completion ids."""
    restarts: int = 0
    """Prompts that diverge inside the previous prompt: another conversation (side call, subagent, compaction)."""
    rerendered: int = 0
    """Prompts that repeat the previous prompt but diverge inside what it sampled: the history was re-rendered
    differently from how it was generated (what corrupts concatenated training sequences)."""
    breaks: list[dict[str, Any]] = field(default_factory=list)
    """Every record that does not extend its previous call: its turn and its `prefix`."""
    by_capture: dict[str, int] = field(default_factory=dict)

    @property
    def consistent(self) -> bool:
        return self.rerendered == 0


def check(records: list[TraceRecord]) -> list[RolloutCheck]:
    """Per rollout (in order of first record), how its calls' prompt ids chain."""
    rollouts: dict[str | None, RolloutCheck] = {}
    for record in records:
        result = rollouts.setdefault(record.rollout_id, RolloutCheck(record.rollout_id))
        result.calls += 1
        verdict = str((record.capture or {}).get("verdict", "unknown"))
        result.by_capture[verdict] = result.by_capture.get(verdict, 0) + 1
        prefix = record.prefix
        if not isinstance(prefix, dict) or "extends" not in prefix:
            continue
        result.checked += 1
        if prefix["extends"]:
            result.extends += 1
            continue
        if prefix.get("diverged_in") == "completion":
            result.rerendered += 1
        else:
            result.restarts += 1
        result.breaks.append({"turn": record.turn, **prefix})
    return list(rollouts.values())
