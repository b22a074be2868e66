"""Rollout benchmark: setup latency (create -> agent running) and 16 concurrent Claude Code rollouts.

    .venv/bin/python bench/runner/rollout_bench.py              # both parts (~2 min on 2 cores)
    .venv/bin/python bench/runner/rollout_bench.py --runs 5 --concurrent 8

Every rollout is the real Claude Code in the claude-code image against agentbake's scripted model
(through a gateway per rollout), on the example tasks. In the same run, beside them:
- setup: raw docker-py create + start + one exec + remove of the same image (the engine's floor), and
  the same rollouts with a warm pool (`--warm 2`);
- concurrency: the sequential rollouts' throughput.
Peak memory: this process's peak RSS (the runner, its gateways and the scripted model) and the peak of
the sum of the sandboxes' memory cgroups (sampled every 0.2 s; cgroup v1 or v2 host paths).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import docker

from agentbake.buildkit import Catalog, build, connect, plan
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.runner import (
    DockerBackend,
    DockerConfig,
    Runner,
    RunnerConfig,
    discover_tasks,
    summarize_results,
)
from agentbake.runner.docker import labels
from agentbake.runner.result import RolloutResult

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def raw_docker(engine: docker.DockerClient, image: str, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        container = engine.containers.run(image, ["sleep", "infinity"], detach=True, init=True, network_mode="none")
        container.exec_run(["true"])
        container.remove(force=True)
        times.append(time.perf_counter() - started)
    return times


def sequential(image: str, tasks: list, runs: int, warm: int, out: Path) -> tuple[list[RolloutResult], float]:
    backend = DockerBackend(DockerConfig(warm=warm))
    config = RunnerConfig(image=image, model="scripted", out_dir=out)
    with Runner(config, backend) as runner:
        runner.start_scripted(tasks)
        runner.run(tasks[0])  # first use: image inspect, pool fill, connection set-up
        started = time.perf_counter()
        results = [runner.run(tasks[i % len(tasks)]) for i in range(runs)]
        wall = time.perf_counter() - started
    backend.close()
    return results, wall


class MemorySampler(threading.Thread):
    """Peak of the summed memory usage of the live sandboxes, from the host's cgroup files."""

    def __init__(self, engine: docker.DockerClient) -> None:
        super().__init__(daemon=True)
        self.engine, self.peak, self.stop = engine, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for container in self.engine.api.containers(filters={"label": labels.ROLLOUT}):  # no inspect: races removal
                for path in (
                    f"/sys/fs/cgroup/memory/docker/{container['Id']}/memory.usage_in_bytes",
                    f"/sys/fs/cgroup/system.slice/docker-{container['Id']}.scope/memory.current",
                ):
                    try:
                        total += int(Path(path).read_text())
                        break
                    except OSError:
                        continue
            self.peak = max(self.peak, total)
            self.stop.wait(0.2)


def concurrent(image: str, tasks: list, count: int, out: Path, engine: docker.DockerClient) -> tuple:
    jobs = [tasks[i % len(tasks)] for i in range(count)]
    sampler = MemorySampler(engine)
    config = RunnerConfig(image=image, model="scripted", out_dir=out)
    with Runner(config) as runner:
        runner.start_scripted(tasks)
        sampler.start()
        started = time.perf_counter()
        results = runner.run_batch(jobs, concurrency=count)
        wall = time.perf_counter() - started
        sampler.stop.set()
    return results, wall, sampler.peak


def row(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return f"| {name} | {statistics.median(values):.3f} | {p95:.3f} | {len(values)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="sequential rollouts per setup variant")
    parser.add_argument("--concurrent", type=int, default=16, help="rollouts started at once")
    args = parser.parse_args()

    engine, catalog = connect(), Catalog.discover()
    image = build(
        engine, plan(engine, catalog.load("claude-code"), catalog.templates_dir, ca_cert=detect_ca_bundle())
    ).tag
    tasks = [task for task in discover_tasks([EXAMPLES]) if not task.has_own_image]  # task_image_bench.py has those
    out = Path(tempfile.mkdtemp(prefix="agentbake-bench-"))

    raw = raw_docker(engine, image, args.runs)
    cold, cold_wall = sequential(image, tasks, args.runs, 0, out / "cold")
    warm, _ = sequential(image, tasks, args.runs, 2, out / "warm")
    print(f"## Rollout setup ({image}, {args.runs} sequential rollouts each, seconds)\n")
    print("| what | p50 | p95 | n |\n|---|---|---|---|")
    print(row("raw docker-py: create + start + exec + remove (baseline)", raw))
    for label, results in (("cold", cold), ("warm pool (--warm 2)", warm)):
        for phase in ("create", "upload", "setup"):
            print(row(f"{label}: {phase}", [r.timings[phase] for r in results]))
        print(row(f"**{label}: create -> agent running**", [r.timings["ready"] for r in results]))
    failed = [r for r in cold + warm if not r.ok]
    print(f"\nsequential: {len(cold) / cold_wall * 60:.1f} rollouts/min; not ok: {len(failed)}")

    results, wall, peak_sandboxes = concurrent(image, tasks, args.concurrent, out / "concurrent", engine)
    summary = summarize_results(results)
    print(f"\n## {args.concurrent} concurrent rollouts (Claude Code + scripted model, {len(tasks)} example tasks)\n")
    print(
        f"all complete: {summary.rollouts == args.concurrent} ({summary.statuses}), reward mean {summary.reward_mean}"
    )
    print(
        f"turns {summary.turns}, tokens captured {summary.tokens}, calls without ids {summary.calls_without_token_ids}"
    )
    print(
        f"wall {wall:.1f} s: {len(results) / wall * 60:.1f} rollouts/min "
        f"(sequential baseline above: {len(cold) / cold_wall * 60:.1f})"
    )
    print(
        f"peak memory: runner process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB RSS, "
        f"sandboxes {peak_sandboxes / 2**20:.0f} MB summed\n"
    )
    print("| phase | p50 (s) | p95 (s) |\n|---|---|---|")
    for phase, stats in summary.phases.items():
        print(f"| {phase} | {stats['p50']:.2f} | {stats['p95']:.2f} |")
    sys.exit(0 if summary.statuses == {"ok": args.concurrent} else 1)


if __name__ == "__main__":
    main()
