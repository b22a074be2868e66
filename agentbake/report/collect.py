"""A job directory read into the report's data: the overview and, per rollout, its detail.

The totals are summary.json's own values; each row adds its result.json's timings and counts. Texts the rollouts share
are stored once in a `Texts` table, each cut at `TEXT_CAP` characters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentbake.errors import AgentbakeError, ReportError
from agentbake.gateway.trace import load_trace
from agentbake.report.turns import turns_of
from agentbake.runner.job import CONFIG_FILE, SUMMARY_FILE
from agentbake.runner.result import PHASES, RolloutResult, percentile

TEXT_CAP = 20_000
"""Characters of one text (a message, a tool call's arguments, a log) the page keeps; the rest is in the job."""
SHARED_MIN = 200
"""Texts at least this long are stored once in the shared table, however many turns or rollouts hold them."""
FAILURE_EXAMPLES = 5
"""Distinct messages shown for each cause of failure."""


@dataclass
class Texts:
    """The texts shared between rollouts, each stored once; a turn refers to one by its index."""

    table: list[str] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict)

    def __call__(self, text: str) -> str | int:
        text = cut(text)
        if len(text) < SHARED_MIN:
            return text
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self.table)
            self.table.append(text)
        return index


def cut(text: str, cap: int = TEXT_CAP) -> str:
    """`text`, cut at `cap` characters with a note of how many more the job's file has."""
    return text if len(text) <= cap else f"{text[:cap]}\n… [{len(text) - cap} more characters in the job's files]"


@dataclass
class JobData:
    """One job as the page shows it: `overview` goes in the page's data, `details` (one per row) are parsed on
    demand."""

    overview: dict[str, Any]
    details: list[str]
    """Each row's detail as a line of JSON safe inside a <script> element (`script_json`)."""


def read_job(directory: Path, texts: Texts) -> JobData:
    """The report's data for the job in `directory`. Raises ReportError naming a missing or unreadable file."""
    summary = _read_json(directory / SUMMARY_FILE, "summary.json is written by `agentbake rollout`")
    config = _read_json(directory / CONFIG_FILE, "config.json is written by `agentbake rollout`")
    if not isinstance(summary.get("rollouts"), list) or not isinstance(summary.get("summary"), dict):
        raise ReportError(
            f"{directory / SUMMARY_FILE}: expected a job's summary (keys `summary` and `rollouts`); "
            f"`agentbake rollout --resume {directory}` writes it anew"
        )
    rows, details, starts, timings = [], [], [], []
    for entry in summary["rollouts"]:
        folder = directory / str(entry.get("folder"))
        try:
            result = RolloutResult.read(folder)
        except AgentbakeError as exc:
            raise ReportError(str(exc)) from None
        detail, start = _detail(folder, result, texts)
        rows.append(_row(entry, result))
        details.append(script_json(detail))  # as text: far smaller than the dicts of 10,000 rollouts
        starts.append(start)
        timings.append(result.timings)
    first = min((s for s in starts if s is not None), default=None)
    for row, start in zip(rows, starts, strict=True):
        row["start_s"] = None if start is None or first is None else round(start - first, 3)
    runner = config.get("runner") if isinstance(config.get("runner"), dict) else {}
    overview = {
        "name": directory.name,
        "path": str(directory),
        "image": runner.get("image"),
        "model": runner.get("model_name") or runner.get("model"),
        "n_attempts": config.get("n_attempts"),
        "n_concurrent": config.get("n_concurrent"),
        "tasks": [task.get("name") for task in config.get("tasks") or [] if isinstance(task, dict)],
        "complete": summary.get("complete"),
        "finished": summary.get("finished"),
        "total": summary.get("total"),
        "summary": summary["summary"],
        "rows": rows,
        "phases": _phase_stats(timings),
        "failures": _failures(rows),
    }
    return JobData(overview, details)


def script_json(value: object) -> str:
    """JSON safe inside a <script> element: `<` only ever appears inside strings, where \\u003c means the same."""
    return orjson.dumps(value).decode().replace("<", "\\u003c")


def _read_json(path: Path, hint: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: missing; expected a job directory ({hint})") from None
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: unreadable ({exc}); {hint}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object; {hint}")
    return data


def _row(entry: dict[str, Any], result: RolloutResult) -> dict[str, Any]:
    """A rollout in the overview: what the heat map, the table and the charts need."""
    return {
        "folder": entry.get("folder"),
        "task": entry.get("task"),
        "attempt": entry.get("attempt"),
        "id": entry.get("rollout_id"),
        "status": entry.get("status"),
        "reward": entry.get("reward"),
        "turns": result.turns,
        "tokens": result.tokens,
        "total_s": result.timings.get("total"),
        "error": result.error.splitlines()[0][:300] if result.error else None,
    }


def _detail(folder: Path, result: RolloutResult, texts: Texts) -> tuple[dict[str, Any], float | None]:
    """A rollout's page, and when its first model call was sent (unix time; None without one)."""
    detail: dict[str, Any] = {
        key: value
        for key, value in result.summary().items()
        if key not in ("out_dir", "rollout_id", "task", "status", "reward", "turns", "tokens")
    }
    detail["error"] = cut(result.error) if result.error else None
    trace_path, start = folder / "trace.jsonl", None
    detail["turns"], detail["skipped"] = [], []
    if trace_path.is_file():
        try:
            trace = load_trace(trace_path)
        except AgentbakeError as exc:
            detail["skipped"] = [str(exc)]
        else:
            detail["turns"] = turns_of(trace.fields, texts)
            detail["skipped"] = [line.message for line in trace.skipped]
            stamps = [raw["timestamp"] for raw in trace.fields if isinstance(raw.get("timestamp"), int | float)]
            start = min(stamps) if stamps else None
    detail["diff"] = _file_text(folder / "workdir.diff")
    detail["verifier_stdout"] = _file_text(folder / "verifier" / "stdout.txt")
    detail["verifier_stderr"] = _file_text(folder / "verifier" / "stderr.txt")
    return detail, start


def _file_text(path: Path) -> str | None:
    """A file of the rollout's folder, cut at TEXT_CAP characters; None when it is absent."""
    try:
        with path.open("rb") as file:
            data = file.read(TEXT_CAP * 4 + 1)
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace")
    if len(data) > TEXT_CAP * 4:
        return f"{text[:TEXT_CAP]}\n… [cut: the whole file is {path}]"
    return cut(text)


def _phase_stats(timings: list[dict[str, float]]) -> dict[str, dict[str, float | int | None]]:
    """Per phase, the spread of its seconds over the rollouts that ran it: min, quartiles, p95, max and n."""
    stats = {}
    for name in (*PHASES, "ready", "total"):
        values = [t[name] for t in timings if isinstance(t.get(name), int | float)]
        if values:
            stats[name] = {
                "min": min(values),
                **{f"p{q}": percentile(values, q) for q in (25, 50, 75, 95)},
                "max": max(values),
                "n": len(values),
            }
    return stats


_VARYING = re.compile(r"0x[0-9a-f]+|[0-9a-f]{8,}|\d+", re.IGNORECASE)


def _failures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rollouts that did not end `ok`, grouped by status and the first line of their error, most frequent first.

    Numbers and ids in the error are blanked, so similar failures group together."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for index, row in enumerate(rows):
        if row["status"] == "ok":
            continue
        cause = _VARYING.sub("#", row["error"] or "(no message)")
        group = groups.setdefault(
            (row["status"], cause), {"status": row["status"], "cause": cause, "rollouts": [], "messages": []}
        )
        group["rollouts"].append(index)
        message = row["error"] or "(no message)"
        if message not in group["messages"] and len(group["messages"]) < FAILURE_EXAMPLES:
            group["messages"].append(message)
    return sorted(groups.values(), key=lambda group: (-len(group["rollouts"]), group["status"], group["cause"]))
