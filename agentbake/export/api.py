"""The export entry points: documents per rollout, one rollout, or straight to a file."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

import orjson

from agentbake.errors import TraceError
from agentbake.export.findings import Finding
from agentbake.export.reader import ALL_ROLLOUTS, index_trace, iter_rollouts
from agentbake.export.sequences import build_document
from agentbake.export.trl import to_trl
from agentbake.gateway.config import LogprobsMode

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
        others = [r for r in index.lines if r != rollout_id] if rollout_ids is not None else []
        if others:
            count = sum(len(index.lines[r]) for r in others)
            extra.append(
                Finding(
                    "foreign_records",
                    f"{index.path} also holds {count} record(s) of {len(others)} other rollout(s)"
                    f" ({', '.join(map(repr, others[:5]))}); they are not part of this export",
                    severity="warning",
                )
            )
        yield build_document(rollout_id, calls, logprobs=logprobs, trace_findings=extra)


def export_rollout(trace: str | os.PathLike[str], rollout_id: str | None, *, logprobs: LogprobsMode = "raw") -> dict:
    """The document of one rollout. A rollout with no record gets a document too, untrainable, with a
    `no_calls` finding (so a runner writes one for every rollout)."""
    return next(export(trace, rollout_ids=[rollout_id], logprobs=logprobs))


def dumps(document: dict, *, format: Format = "json") -> bytes:
    """A document as one deterministic JSON line: sorted keys, no timestamps, same trace -> same bytes."""
    payload = to_trl(document) if format == "trl" else document
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


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
        folder = Path(out_dir) / name
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / "sequences.json.partial"
        partial.write_bytes(dumps(document))
        partial.replace(folder / "sequences.json")
        summaries.append(summary(document))
    return summaries


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
