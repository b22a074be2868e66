"""`agentbake report` on generated jobs: the time to write the report and to open it in headless Chromium (load
event, the overview drawn, then a rollout's page), beside a 100-rollout job and an empty page's load (the floor).

    .venv/bin/python bench/report/bench.py [--sizes 100,10000] [--turns 6] [--prompt-ids 256]

Each job is `tasks x attempts` rollouts written as `agentbake rollout` writes them (result.json through
RolloutResult, summary.json through Job.write_summary): a tool loop of `--turns` calls per rollout whose
requests repeat the conversation so far, one system prompt and tool list shared by every rollout, a bash call
and its output per turn, logprobs per completion token, `--prompt-ids` prompt ids per call; one rollout in ten
fails (agent error, timeout, setup error) with a message. The report is written by the CLI in its own process
(wall time and peak RSS); Chromium is Debian's, headless.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agentbake.runner.docker.config import DockerConfig  # noqa: E402
from agentbake.runner.job import Job, JobBackend, JobConfig, JobTask, rollout_folder  # noqa: E402
from agentbake.runner.result import PHASES, RolloutResult, Status  # noqa: E402
from agentbake.runner.runner_config import RunnerConfig  # noqa: E402
from tests.report.browser import Browser  # noqa: E402

SYSTEM = "You are a coding agent working in /app. " * 200
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in ("Bash", "Read")
]
FAILURES = [
    (Status.AGENT_ERROR, "the agent exited with status {n}"),
    (Status.AGENT_TIMEOUT, "the agent ran past its timeout of {n} s and was stopped"),
    (Status.SETUP_ERROR, "environment/setup.sh exited {n}: pip could not reach the index"),
]


def shape(rollouts: int) -> tuple[int, int]:
    """Tasks and attempts for about `rollouts` rollouts (at most 20 attempts a task)."""
    attempts = min(20, max(1, round(math.sqrt(rollouts / 5))))
    return math.ceil(rollouts / attempts), attempts


def generate(directory: Path, rollouts: int, turns: int, prompt_ids: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    n_tasks, attempts = shape(rollouts)
    tasks = [JobTask(name=f"task-{i:05d}", path=Path(f"/tasks/task-{i:05d}"), digest="0" * 64) for i in range(n_tasks)]
    config = JobConfig(
        runner=RunnerConfig(image="agentbake/claude-code:000000000000", model="scripted", out_dir=directory),
        backend=JobBackend(config=DockerConfig()),
        tasks=tuple(tasks),
        n_attempts=attempts,
        n_concurrent=16,
    )
    job = Job.start(directory, config)
    clock = 1_767_225_600.0
    for number, (name, attempt, folder) in enumerate(job.rollouts()):
        folder.mkdir()
        rollout_id = f"{name}-{number:08x}"
        messages: list[dict] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Fix the failing test of {name}; attempt {attempt}."},
        ]
        lines = []
        for turn in range(turns):
            completion = [rng.randrange(100, 50_000) for _ in range(rng.randrange(20, 200))]
            last = turn == turns - 1
            call = {"id": f"call-{number}-{turn}", "type": "function"}
            call["function"] = {
                "name": "Bash",
                "arguments": orjson.dumps({"command": f"pytest -q tests/{turn}"}).decode(),
            }
            reply = {"role": "assistant", "content": "Done." if last else None, "tool_calls": [] if last else [call]}
            record = {
                "turn": turn,
                "request": {"model": "scripted", "messages": list(messages), "tools": TOOLS},
                "response": {"choices": [{"index": 0, "message": reply, "finish_reason": "stop"}]},
                "logprobs": [],
                "completion_tokens": len(completion),
                "completion_token_ids": completion,
                "per_token_logps": [round(-rng.expovariate(2), 6) for _ in completion],
                "finish_reason": "stop" if last else "tool_calls",
                "latency_s": round(rng.uniform(0.2, 3), 3),
                "timestamp": clock + number * 0.5 + turn,
                "schema_version": 2,
                "rollout_id": rollout_id,
                "dialect": "anthropic",
                "prompt_token_ids": [rng.randrange(100, 50_000) for _ in range(prompt_ids)],
                "upstream_status": 200,
                "upstream_error": None,
                "retry_of": None,
            }
            lines.append(orjson.dumps(record) + b"\n")
            output = f"{rng.randrange(1, 40)} passed, {rng.randrange(0, 3)} failed in 0.{rng.randrange(10, 99)}s\n" * 8
            messages += [reply, {"role": "tool", "tool_call_id": call["id"], "content": output}]
        (folder / "trace.jsonl").write_bytes(b"".join(lines))
        (folder / "workdir.diff").write_text(f"--- a/{name}.py\n+++ b/{name}.py\n@@ -1 +1 @@\n-x = 1\n+x = {attempt}\n")
        (folder / "verifier").mkdir()
        (folder / "verifier" / "stdout.txt").write_text("1 passed in 0.01s\n")
        status, error = Status.OK, None
        if rng.random() < 0.1:
            status, template = rng.choice(FAILURES)
            error = template.format(n=rng.randrange(1, 200))
        timings = {phase: round(rng.lognormvariate(-1, 1), 4) for phase in PHASES}
        timings["total"] = round(sum(timings.values()), 4)
        RolloutResult(
            rollout_id=rollout_id,
            task=name,
            status=status,
            reward=float(status is Status.OK and rng.random() < 0.6),
            image="agentbake/claude-code:000000000000",
            agent="claude-code",
            timings=timings,
            turns=turns,
            tokens=turns * 100,
            error=error,
            out_dir=folder,
        ).write()
        assert folder.name == rollout_folder(name, attempt)
    job.write_summary()


def write_report(directory: Path) -> tuple[float, float, int]:
    """Seconds and peak RSS (MiB) of `agentbake report DIR` in its own process, and the file's size."""
    probe = (
        "import resource, sys\nfrom agentbake.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
        "    pass\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
    )
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe, "report", str(directory)], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    assert done.returncode == 0 and (directory / "report.html").is_file(), done.stderr
    rss = int(done.stderr.splitlines()[-1]) / 1024
    return seconds, rss, (directory / "report.html").stat().st_size


def open_in_chromium(page: Path, rollout_route: str | None) -> tuple[float, float | None, float | None]:
    """Seconds to the load event (the overview is drawn by then), to a rollout's page first and second opened."""
    with Browser() as browser:
        loaded = browser.open(page)
        first = second = None
        if rollout_route:
            started = time.perf_counter()
            browser.go(f"{rollout_route}/0")
            first = time.perf_counter() - started
            started = time.perf_counter()
            browser.go(f"{rollout_route}/1")
            second = time.perf_counter() - started
            assert browser.evaluate("document.querySelectorAll('.turn').length") > 0
        assert browser.errors == [], browser.errors
    return loaded, first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,10000", help="Rollouts per job, comma-separated.")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--prompt-ids", type=int, default=256)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentbake-report-bench-") as tmp:
        empty = Path(tmp) / "empty.html"
        empty.write_text("<!DOCTYPE html><title>empty</title><p>empty</p>\n")
        loaded, _, _ = open_in_chromium(empty, None)
        rows.append(("empty page (floor)", "-", "-", "-", "-", f"{loaded:.2f}", "-", "-"))
        for size in (int(s) for s in args.sizes.split(",")):
            job = Path(tmp) / f"job-{size}"
            started = time.perf_counter()
            generate(job, size, args.turns, args.prompt_ids)
            generated = time.perf_counter() - started
            trace_mb = sum(p.stat().st_size for p in job.glob("*/trace.jsonl")) / 2**20
            seconds, rss, size_bytes = write_report(job)
            loaded, first, second = open_in_chromium(job / "report.html", "#rollout/0")
            rows.append(
                (
                    f"{size} rollouts ({trace_mb:.0f} MiB of traces, generated in {generated:.0f} s)",
                    f"{seconds:.2f}",
                    f"{rss:.0f}",
                    f"{size_bytes / 2**20:.1f}",
                    f"{size_bytes / size / 1024:.1f}",
                    f"{loaded:.2f}",
                    f"{first:.2f}",
                    f"{second:.2f}",
                )
            )
    head = ("job", "report s", "RSS MiB", "HTML MiB", "KiB/rollout", "Chromium load s", "1st rollout s", "2nd s")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for row in rows:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
