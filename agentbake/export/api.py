"""The export entry points: documents per rollout, one rollout, or straight to a file."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Literal

import orjson

from agentbake.errors import TraceError
from agentbake.export.findings import Finding
from agentbake.export.reader import ALL_ROLLOUTS, calls_of, index_trace, iter_rollouts, skipped_findings
from agentbake.export.sequences import build_document
from agentbake.export.trl import to_trl
from agentbake.gateway.config import LogprobsMode
from agentbake.gateway.trace import Trace

Format = Literal["json", "trl"]


def export(
    trace: str | os.PathLike[str],
    *,
    rollout_ids: Iterable[str | None] | None = None,
    logprobs: LogprobsMode = "raw",
) -> Iterator[dict]:
    """One document per rollout of `trace` (all of them, in order of first record, or `rollout_ids`), built
    one rollout at a time. Raises TraceError for an unreadable file or an unknown schema version."""
    index = index_trace(trace)
    chosen = ALL_ROLLOUTS if rollout_ids is None else list(rollout_ids)
    for rollout_id, calls, extra in iter_rollouts(index, chosen):
        if rollout_ids is not None:
            extra += _foreign(index.path, {r: len(lines) for r, lines in index.lines.items() if r != rollout_id})
        yield build_document(rollout_id, calls, logprobs=logprobs, trace_findings=extra)


def export_trace(trace: Trace, rollout_id: str | None, *, logprobs: LogprobsMode = "raw") -> dict:
    """One rollout's document from a trace already read, as `export_rollout` makes it from the file."""
    others = Counter(raw.get("rollout_id") for raw in trace.fields if raw.get("rollout_id") != rollout_id)
    findings = skipped_findings(trace.skipped) + _foreign(trace.path, others)
    return build_document(rollout_id, calls_of(trace, rollout_id), logprobs=logprobs, trace_findings=findings)


def _foreign(path: Path, others: Mapping[str | None, int]) -> list[Finding]:
    """The finding of a one-rollout export whose trace also holds records of `others` (rollout -> records)."""
    if not others:
        return []
    return [
        Finding(
            "foreign_records",
            f"{path} also holds {sum(others.values())} record(s) of {len(others)} other rollout(s)"
            f" ({', '.join(map(repr, list(others)[:5]))}); they are not part of this export",
            severity="warning",
        )
    ]


def export_rollout(trace: str | os.PathLike[str], rollout_id: str | None, *, logprobs: LogprobsMode = "raw") -> dict:
    """The document of one rollout. A rollout with no record gets a document too, untrainable, with a
    `no_calls` finding (so a runner writes one for every rollout)."""
    return next(export(trace, rollout_ids=[rollout_id], logprobs=logprobs))


def dumps(document: dict, *, format: Format = "json") -> bytes:
    """A document as one deterministic JSON line: sorted keys, no timestamps, same trace -> same bytes."""
    payload = to_trl(document) if format == "trl" else document
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def write_document(document: dict, out_file: str | os.PathLike[str]) -> dict:
    """Write one rollout's document (`export_trace`) to `out_file` as `write_sequences` does; returns its summary."""
    _write_whole(Path(out_file), dumps(document))
    return summary(document)


def write_sequences(
    trace: str | os.PathLike[str],
    out_file: str | os.PathLike[str],
    *,
    rollout_id: str | object | None = ALL_ROLLOUTS,
    format: Format = "json",
    logprobs: LogprobsMode = "raw",
) -> list[dict]:
    """Write the export of `trace` (every rollout as JSON lines, or just `rollout_id`) to `out_file`, through a
    temporary file renamed into place so a reader never sees half a file. Returns each rollout's
    `{"rollout_id", "trainable", "sequences", "findings"}` summary."""
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    ids = None if rollout_id is ALL_ROLLOUTS else [rollout_id]
    summaries = []
    with partial.open("wb") as file:
        for document in export(trace, rollout_ids=ids, logprobs=logprobs):  # type: ignore[arg-type]
            file.write(dumps(document, format=format))
            summaries.append(summary(document))
    partial.replace(out)
    return summaries


def write_rollout_sequences(
    trace: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, logprobs: LogprobsMode = "raw"
) -> list[dict]:
    """`out_dir/<rollout_id>/sequences.json` for every rollout of a shared trace, in one pass over the file
    (records without a rollout id go to `out_dir/_/`). Returns each rollout's summary."""
    summaries = []
    for document in export(trace, logprobs=logprobs):
        name = document["rollout_id"] or "_"
        if name in (".", "..") or "/" in name:
            raise TraceError(f"{trace}: rollout id {name!r} cannot name a folder under {out_dir}")
        _write_whole(Path(out_dir) / name / "sequences.json", dumps(document))
        summaries.append(summary(document))
    return summaries


def _write_whole(path: Path, data: bytes) -> None:
    """Through a temporary file renamed into place, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)


def summary(document: dict) -> dict:
    """What a CLI or a runner prints about one exported rollout."""
    roles: dict[str, int] = {}
    for sequence in document["sequences"]:
        roles[sequence["role"]] = roles.get(sequence["role"], 0) + 1
    findings = document["validation"]["findings"]
    return {
        "calls": len(document["calls"]),
        "errors": sum(f["severity"] == "error" for f in findings),
        "rollout_id": document["rollout_id"],
        "sequences": roles,
        "trainable": document["validation"]["trainable"],
        "warnings": sum(f["severity"] == "warning" for f in findings),
    }
