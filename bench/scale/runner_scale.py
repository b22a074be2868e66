"""The runner's own cost per rollout as concurrency grows, beside the engine's floor at the same concurrency.

    .venv/bin/python bench/scale/runner_scale.py                          # ~4 min on 2 cores
    .venv/bin/python bench/scale/runner_scale.py --concurrency 1,4 --rollouts 8   # ~1 min
    .venv/bin/python bench/scale/runner_scale.py --task examples/tasks/fix-failing-test --image claude-code

Per level C (--concurrency), in the same run, alternating --rounds times (half the rollouts each with the
default 2) so that a change of the machine's load hits both:
- floor: raw docker-py low-level calls (`bench/runner/oracle_bench.py`'s `floor_rollout`: create + start + exec
  solve.sh as the image's user + exec test.sh as root + remove, network none), --rollouts of them on C
  threads: the engine's cost of the same work with nothing of ours;
- runner: `Runner.run_batch(task, repeats=--rollouts, concurrency=C)` with `oracle=True` in a long-lived
  subprocess (the runner as a trainer holds it, imports and first-use costs paid by a warm-up rollout): the
  task's policy per phase (egress proxy), upload, setup, solve.sh, stop, verifier, collect, teardown.
Per rollout: wall (the batch's wall / rollouts), the runner process's CPU (user + system of every thread,
getrusage), the engine's CPU (dockerd + containerd and the children they reaped, from /proc; the
containers' own processes are not in it; the engine is shared, so other users' requests are), and the
phases' medians from each result's timings (what result.json holds). The default task is
examples/tasks/write-file (the catalog image, a test.sh of its own), so the floor runs the very same
solve.sh and test.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the oracle bench's floor

from bench.runner.oracle_bench import floor_rollout, med  # noqa: E402

ENGINE_PROCESSES = ("dockerd", "containerd")
TICK = os.sysconf("SC_CLK_TCK")


def engine_cpu_s() -> float:
    """CPU seconds of the engine's daemons so far, with the children they reaped (0 where not readable)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        if name in ENGINE_PROCESSES:
            fields = text.rsplit(")", 1)[1].split()
            total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK
    return total


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the runner probe (a subprocess) ----------------------------------------------------------------------


def serve_probe(image: str, task_dir: str, out: str) -> None:
    """Run one batch per line `CONCURRENCY ROLLOUTS` read on stdin; one JSON line each on stdout."""
    from agentbake.runner.runner import Runner
    from agentbake.runner.runner_config import RunnerConfig
    from agentbake.tasks import load_task

    reports = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr
    task = load_task(Path(task_dir))
    with Runner(RunnerConfig(image=image, oracle=True, out_dir=Path(out))) as runner:
        runner.run(task)  # first use: image facts, engine connection, the egress service
        for line in sys.stdin:
            concurrency, rollouts = map(int, line.split())
            cpu, engine, started = self_cpu_s(), engine_cpu_s(), time.perf_counter()
            results = runner.run_batch([task], repeats=rollouts, concurrency=concurrency)
            wall = time.perf_counter() - started
            report = {
                "wall": wall,
                "cpu": self_cpu_s() - cpu,
                "engine": engine_cpu_s() - engine,
                "ok": sum(r.ok and r.reward == 1.0 for r in results),
                "timings": [r.timings for r in results],
            }
            print(json.dumps(report), file=reports, flush=True)


# -- the run ----------------------------------------------------------------------------------------------


def floor_batch(args: tuple, concurrency: int, rollouts: int) -> dict[str, float]:
    engine, started = engine_cpu_s(), time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: floor_rollout(*args), range(rollouts)))
    return {"wall": time.perf_counter() - started, "engine": engine_cpu_s() - engine}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,2,4,8", help="rollouts at once per level, comma-separated")
    parser.add_argument("--rollouts", type=int, default=16, help="rollouts per level (each side)")
    parser.add_argument("--rounds", type=int, default=2, help="floor and runner alternate this often per level")
    parser.add_argument("--task", type=Path, default=REPO / "examples" / "tasks" / "write-file")
    parser.add_argument("--image", default="claude-code", help="catalog name or tag")
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)  # IMAGE TASK_DIR OUT
    args = parser.parse_args()
    if args.probe:
        serve_probe(*args.probe)
        return

    from agentbake.runner.images import resolve_image

    levels = [int(c) for c in args.concurrency.split(",")]
    task_dir = args.task.resolve()
    image = resolve_image(args.image)
    api = docker.APIClient(version="auto")
    labels = api.inspect_image(image)["Config"].get("Labels") or {}
    user, workdir = labels.get("dev.agentbake.user", "agent"), labels.get("dev.agentbake.dir.workdir", "/")
    solve, test = (task_dir / "solution" / "solve.sh").read_text(), (task_dir / "tests" / "test.sh").read_text()
    floor_args = (api, image, user, workdir, solve, test)
    work = Path(tempfile.mkdtemp(prefix="agentbake-runner-scale-"))
    load_start = os.getloadavg()
    probe = subprocess.Popen(
        [sys.executable, __file__, "--probe", image, str(task_dir), str(work)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert probe.stdin is not None and probe.stdout is not None
    floor_rollout(*floor_args)  # warm-up
    rows: list[tuple[int, dict[str, float], dict[str, Any]]] = []
    loads: list[float] = []
    try:
        for concurrency in levels:
            floor: dict[str, float] = {"wall": 0.0, "engine": 0.0}
            ours: dict[str, Any] = {"wall": 0.0, "cpu": 0.0, "engine": 0.0, "ok": 0, "timings": []}
            for _ in range(args.rounds):  # floor and runner alternate, so a change of load hits both
                for key, value in floor_batch(floor_args, concurrency, args.rollouts // args.rounds).items():
                    floor[key] += value
                probe.stdin.write(f"{concurrency} {args.rollouts // args.rounds}\n")
                probe.stdin.flush()
                line = probe.stdout.readline()
                if not line:
                    sys.exit("the runner probe ended")
                for key, value in json.loads(line).items():
                    if key in ours:
                        ours[key] += value
            rows.append((concurrency, floor, ours))
            loads.append(os.getloadavg()[0])
            print(f"  C={concurrency} done, load {loads[-1]:.1f}", file=sys.stderr)
    finally:
        probe.stdin.close()
        probe.wait(120)
        shutil.rmtree(work, ignore_errors=True)
    report(image, task_dir, args.rollouts // args.rounds * args.rounds, rows, loads, load_start)


def report(
    image: str,
    task_dir: Path,
    rollouts: int,
    rows: list[tuple[int, dict[str, float], dict[str, Any]]],
    loads: list[float],
    load_start: tuple[float, float, float],
) -> None:
    print(f"\n# Oracle rollouts per level of concurrency ({image}, task {task_dir.name}, {rollouts} per level)\n")
    print(f"{os.cpu_count()} cores; load average at start {load_start[0]:.2f}; per level below (1-min, at its end)\n")
    header = ("C", "load", "floor s/rollout", "runner s/rollout", "x floor", "rollouts/min", "floor rollouts/min")
    header += ("runner CPU s/rollout", "engine CPU s/rollout", "floor engine CPU s/rollout", "ok")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for (concurrency, floor, ours), load in zip(rows, loads, strict=True):
        per, floor_per = ours["wall"] / rollouts, floor["wall"] / rollouts
        cells = (
            str(concurrency),
            f"{load:.1f}",
            f"{floor_per:.3f}",
            f"{per:.3f}",
            f"{per / floor_per:.2f}x",
            f"{60 / per:.0f}",
            f"{60 / floor_per:.0f}",
            f"{ours['cpu'] / rollouts:.3f}",
            f"{ours['engine'] / rollouts:.3f}",
            f"{floor['engine'] / rollouts:.3f}",
            f"{ours['ok']}/{rollouts}",
        )
        print("| " + " | ".join(cells) + " |")
    phases = list(dict.fromkeys(p for _, _, ours in rows for t in ours["timings"] for p in t))
    print("\n## Phase medians per rollout (seconds, from result.json's timings)\n")
    print("| phase | " + " | ".join(f"C={c}" for c, _, _ in rows) + " |")
    print("|---" * (len(rows) + 1) + "|")
    for phase in phases:
        cells = [f"{med([t.get(phase, 0.0) for t in ours['timings']]):.3f}" for _, _, ours in rows]
        print(f"| {phase} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
