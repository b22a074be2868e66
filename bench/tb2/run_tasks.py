"""Run Terminal-Bench 2.0 tasks unchanged through the agentbake CLI, one at a time, and print a table.

    .venv/bin/python bench/tb2/run_tasks.py TB2/ --tasks cancel-async-tasks,fix-git --mode oracle
    .venv/bin/python bench/tb2/run_tasks.py TB2/ --mode scripted --json > scripted.jsonl
    .venv/bin/python bench/tb2/run_tasks.py --show OUT/runs.jsonl     # the table again, from a run's record

Each task is one `agentbake run IMAGE --path T (--oracle | --upstream scripted) [--verifier-network N] --json`
(nothing else of agentbake is imported, so the table measures what a user gets). Per task: the status, the
reward, the seconds of each phase (result.json's `timings`), the command's wall time, `pre` = wall - total
(the CLI's start and what ran before the rollout's clock: the task image's build on its first run shows
here), and the first line of the error or of the first note. Each task's line is also appended to
OUT/runs.jsonl (with its whole result.json) as it finishes. The bases the tasks start FROM must exist
locally first (bench/tb2/standins.py). `--verifier-network` defaults to `task`: no flag, each phase gets the
network its task declares (TB2 declares none: public hosts, through the rollout's egress proxy).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The phases shown in the table, in the order a rollout runs them; result.json may hold more (--json has all).
SHOWN_PHASES = ("image", "create", "setup", "agent", "stop", "verifier", "total")
DEFAULT_TIMEOUT_S = 3600.0


@dataclass
class TaskRun:
    """One task's rollout as the CLI reported it."""

    task: str
    status: str
    """The rollout's status, or `cli-error` (no result line) / `cli-timeout` (killed after --timeout)."""
    reward: float | None
    wall: float
    """Seconds of the whole `agentbake run` command."""
    timings: dict[str, float] = field(default_factory=dict)
    note: str = ""
    """The first line of the error, else of the first note, else of the CLI's stderr when it gave no result."""
    out_dir: str = ""
    result: dict[str, Any] | None = None
    """result.json as the CLI printed it."""


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def discover(tasks_dir: Path, names: list[str] | None) -> list[Path]:
    """The task folders to run: the named ones (each must exist), else every folder with a task.toml."""
    if names:
        missing = [name for name in names if not (tasks_dir / name / "task.toml").is_file()]
        if missing:
            raise SystemExit(f"--tasks: no {', '.join(f'{tasks_dir / m}/task.toml' for m in missing)}")
        return [tasks_dir / name for name in names]
    found = sorted(path.parent for path in tasks_dir.glob("*/task.toml"))
    if not found:
        raise SystemExit(f"{tasks_dir}: no */task.toml under it; give a folder of Harbor task folders")
    return found


def default_cli() -> list[str]:
    """The `agentbake` script beside this interpreter (a venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("agentbake")
    if beside.is_file():
        return [str(beside)]
    on_path = shutil.which("agentbake")
    if on_path is None:
        raise SystemExit("no agentbake CLI beside this python or on PATH; pass --cli")
    return [on_path]


def run_one(cli: list[str], task: Path, args: argparse.Namespace, out: Path) -> TaskRun:
    """One `agentbake run`, its last JSON result line read back."""
    mode = ["--oracle"] if args.mode == "oracle" else ["--upstream", "scripted"]
    command = [*cli, "run", args.image, "--path", str(task), *mode]
    if args.allowlist:  # both phases reach only these hosts
        command += ["--agent-network", "allowlist", "--verifier-network", "allowlist"]
        command += ["--allowed-hosts", args.allowlist]
    elif args.verifier_network != "task":
        command += ["--verifier-network", args.verifier_network]
    command += ["--json", "--rollouts-dir", str(out)]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        wall = round(time.monotonic() - started, 1)
        return TaskRun(task.name, "cli-timeout", None, wall, note=f"killed after {args.timeout:g} s")
    wall = round(time.monotonic() - started, 1)
    result = None
    for line in reversed(done.stdout.splitlines()):
        try:
            candidate = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(candidate, dict) and "status" in candidate:
            result = candidate
            break
    if result is None:
        note = first_line(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.stdout)
        return TaskRun(task.name, "cli-error", None, wall, note=note or f"exit {done.returncode}, no output")
    notes = result.get("notes") or []
    note = first_line(result.get("error")) or (first_line(str(notes[0])) if notes else "")
    timings = {key: float(value) for key, value in (result.get("timings") or {}).items()}
    return TaskRun(
        task.name,
        str(result.get("status")),
        result.get("reward"),
        wall,
        timings,
        note,
        str(result.get("out_dir", "")),
        result,
    )


def print_header(title: str) -> None:
    print(title, flush=True)
    phases = " ".join(f"{phase:>8}" for phase in SHOWN_PHASES)
    print(f"{'task':<26} {'status':<16} {'reward':>6} {phases} {'wall':>7} {'pre':>6}  note")


def print_row(run: TaskRun) -> None:
    reward = "-" if run.reward is None else f"{run.reward:g}"
    phases = " ".join(f"{run.timings[p]:>8.1f}" if p in run.timings else f"{'-':>8}" for p in SHOWN_PHASES)
    pre = f"{run.wall - run.timings['total']:>6.1f}" if "total" in run.timings else f"{'-':>6}"
    print(f"{run.task:<26} {run.status:<16} {reward:>6} {phases} {run.wall:>7.1f} {pre}  {run.note[:120]}", flush=True)


def print_summary(runs: list[TaskRun]) -> None:
    solved = sum(1 for run in runs if run.reward == 1)
    ok = sum(1 for run in runs if run.status == "ok")
    print(f"{solved} of {len(runs)} reward 1; {ok} of {len(runs)} status ok")


def show(record: Path) -> None:
    """The table of a finished run, from its runs.jsonl."""
    try:
        lines = record.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SystemExit(f"--show {record}: cannot read it ({exc.strerror})") from None
    runs = []
    for number, line in enumerate(lines, 1):
        try:
            runs.append(TaskRun(**json.loads(line)))
        except (json.JSONDecodeError, TypeError) as exc:
            raise SystemExit(f"--show {record}:{number}: not a line run_tasks.py wrote ({exc})") from None
    print_header(f"from {record}")
    for run in runs:
        print_row(run)
    print_summary(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks_dir", type=Path, nargs="?", metavar="TASKS_DIR", help="a folder of task folders")
    parser.add_argument("--tasks", help="comma-separated task folder names (default: every one)")
    parser.add_argument("--mode", choices=("oracle", "scripted"), default="oracle")
    parser.add_argument("--verifier-network", choices=("task", "none", "public", "bridge"), default="task")
    parser.add_argument(
        "--allowlist", metavar="HOST[,HOST...]", help="both phases reach only these hosts (over --verifier-network)"
    )
    parser.add_argument("--image", default="claude-code", help="the agent image argument of `agentbake run`")
    parser.add_argument("--out", type=Path, help="where rollouts write (default: a new folder under /tmp)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per task command")
    parser.add_argument("--cli", help="the agentbake command (default: the one beside this python)")
    parser.add_argument("--json", action="store_true", help="one JSON object per task (with result.json)")
    parser.add_argument("--show", type=Path, metavar="RUNS_JSONL", help="print the table of a finished run")
    args = parser.parse_args()
    if args.show:
        show(args.show)
        return
    if args.tasks_dir is None:
        parser.error("TASKS_DIR is required (a folder of Harbor task folders), unless --show")
    if not args.tasks_dir.is_dir():
        parser.error(f"TASKS_DIR {args.tasks_dir}: not a folder")
    names = [name.strip() for name in args.tasks.split(",") if name.strip()] if args.tasks else None
    tasks = discover(args.tasks_dir, names)
    cli = args.cli.split() if args.cli else default_cli()
    out = args.out or Path(tempfile.mkdtemp(prefix=f"tb2-{args.mode}-"))
    out.mkdir(parents=True, exist_ok=True)
    if not args.json:
        print_header(f"mode {args.mode}, image {args.image}, verifier network {args.verifier_network}, out {out}")
    runs = []
    for task in tasks:
        run = run_one(cli, task, args, out)
        runs.append(run)
        line = json.dumps(asdict(run))
        with (out / "runs.jsonl").open("a", encoding="utf-8") as record:
            record.write(line + "\n")
        if args.json:
            print(line, flush=True)
        else:
            print_row(run)
    if not args.json:
        print_summary(runs)


if __name__ == "__main__":
    main()
