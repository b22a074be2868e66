"""Oracle rollout latency: the CLI and the runner beside the engine's floor, phase by phase (issue 17).

    .venv/bin/python bench/runner/oracle_bench.py                 # ~3 min on 2 loaded cores
    .venv/bin/python bench/runner/oracle_bench.py --runs 5 --batch 16 --task DIR

All in one run, on one Harbor-layout task (a throwaway one unless --task), the claude-code image:
- floor: raw docker-py low-level calls, create + start + exec solve.sh (as the image's user) + exec test.sh
  (as root) + remove, network none (the engine's cost of the same work, nothing of ours);
- CLI: `agentbake run claude-code --task T --oracle` end to end, in a subprocess (imports, catalog
  resolution, engine connection, the rollout, result writing);
- runner: `Runner.run` in this process, per phase: seconds, engine round trips (HTTP requests to the engine,
  by endpoint), the harness's commands (execs) and the time spent waiting on the engine;
- throughput: `agentbake rollout --oracle -k N -n C` in rollouts/min beside the floor run C at once;
- start-up: `agentbake run --help` (wall and CPU) and which heavy modules it imports.
Floor, CLI and runner runs are interleaved one by one so the machine's load hits them alike; medians.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[2]
AGENTBAKE = Path(sys.executable).with_name("agentbake")
HEAVY_MODULES = ("docker", "pydantic", "rich", "starlette", "httpx", "agentbake.gateway.app", "agentbake.export")

TASK_TOML = "[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 30.0\n"
SOLVE = '#!/bin/bash\necho "latency ok" > answer.txt\n'
TEST = """#!/bin/bash
if [ "$(cat answer.txt 2>/dev/null)" = "latency ok" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def write_task(folder: Path) -> Path:
    """A Harbor-layout task no example ships: solution writes a file, the test checks it."""
    for name, text, mode in (
        ("task.toml", TASK_TOML, 0o644),
        ("instruction.md", 'Write the line "latency ok" into answer.txt.\n', 0o644),
        ("solution/solve.sh", SOLVE, 0o755),
        ("tests/test.sh", TEST, 0o755),
    ):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
    return folder


# -- the floor --------------------------------------------------------------------------------------


def floor_rollout(api: docker.APIClient, image: str, user: str, workdir: str, solve: str, test: str) -> float:
    started = time.perf_counter()
    host_config = api.create_host_config(network_mode="none")
    container = api.create_container(image, command=["sleep", "infinity"], host_config=host_config)["Id"]
    api.start(container)
    for cmd, as_user in ((solve, user), (f"mkdir -p /logs/verifier\n{test}", "root")):
        exec_id = api.exec_create(container, ["bash", "-c", cmd], user=as_user, workdir=workdir)["Id"]
        api.exec_start(exec_id, demux=True)
        assert api.exec_inspect(exec_id)["ExitCode"] == 0
    api.remove_container(container, force=True)
    return time.perf_counter() - started


# -- the CLI ----------------------------------------------------------------------------------------


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode cached
    return env


def run_cli(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of `agentbake ARGS`; exits the bench when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([str(AGENTBAKE), *args], capture_output=True, text=True, env=cli_env())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"agentbake {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def help_imports() -> list[str]:
    """The heavy modules `agentbake run --help` imports."""
    code = (
        "import sys; from agentbake.cli import main\n"
        "try: main(['run', '--help'])\nexcept SystemExit: pass\n"
        f"print(' '.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    return done.stdout.strip().splitlines()[-1].split() if done.stdout.strip() else []


# -- the runner, instrumented -----------------------------------------------------------------------


class Probe:
    """Engine requests and harness commands per phase of the rollout running in this thread."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.runs: list[dict[str, dict[str, float]]] = []
        self.sample: dict[str, list[str]] = defaultdict(list)  # one run's requests and commands, for the table

    @contextmanager
    def rollout(self, keep_sample: bool) -> Iterator[None]:
        self.local.counts = defaultdict(Counter)
        self.local.keep = keep_sample
        try:
            yield
        finally:
            self.runs.append({phase: dict(c) for phase, c in self.local.counts.items()})
            self.local.counts = None

    def note(self, kind: str, label: str, seconds: float) -> None:
        counts = getattr(self.local, "counts", None)
        if counts is None:
            return
        phase = getattr(self.local, "phase", None) or "(outside phases)"
        counts[phase][kind] += 1
        counts[phase][f"{kind}_s"] += seconds
        if self.local.keep:
            self.sample[phase].append(label)

    def install(self) -> None:
        """Wrap the engine client's `send`, the sandbox's `exec` and the runner's phases (this process only)."""
        from agentbake.runner.docker.sandbox import DockerSandbox
        from agentbake.runner.result import Timings

        probe = self
        send, exec_, phase = docker.APIClient.send, DockerSandbox.exec, Timings.phase

        def timed_send(client: docker.APIClient, request: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return send(client, request, **kwargs)
            finally:
                path = request.path_url.split("?")[0]  # type: ignore[attr-defined]
                parts = ["{id}" if len(p) >= 32 or p.startswith("agentbake-") else p for p in path.split("/")]
                endpoint = "/".join(parts[2:] if parts[1].startswith("v1.") else parts[1:])
                probe.note("requests", f"{request.method} /{endpoint}", time.perf_counter() - started)  # type: ignore[attr-defined]

        def timed_exec(sandbox: DockerSandbox, cmd: object, *args: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return exec_(sandbox, cmd, *args, **kwargs)
            finally:
                text = cmd if isinstance(cmd, str) else " ".join(map(str, cmd))  # type: ignore[arg-type]
                probe.note("execs", f"exec: {text[:70]!r}", time.perf_counter() - started)

        @contextmanager
        def named_phase(timings: Timings, name: str) -> Iterator[None]:
            outer = getattr(probe.local, "phase", None)
            probe.local.phase = name
            try:
                with phase(timings, name):
                    yield
            finally:
                probe.local.phase = outer

        docker.APIClient.send = timed_send  # type: ignore[method-assign]
        DockerSandbox.exec = timed_exec  # type: ignore[method-assign]
        Timings.phase = named_phase  # type: ignore[method-assign]

    def median(self, phase: str, key: str) -> float:
        return statistics.median(run.get(phase, {}).get(key, 0.0) for run in self.runs)


# -- report -----------------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="sequential rollouts of each kind (interleaved)")
    parser.add_argument("--batch", type=int, default=32, help="rollouts in the throughput batch (-k)")
    parser.add_argument("--concurrent", type=int, default=8, help="rollouts at once in the batch (-n)")
    parser.add_argument("--task", type=Path, help="a Harbor-layout task with solution/ (default: a throwaway one)")
    parser.add_argument("--image", default="claude-code", help="catalog name or tag")
    args = parser.parse_args()

    from agentbake.runner import Runner, RunnerConfig, load_task
    from agentbake.runner.cli import resolve_image

    work = Path(tempfile.mkdtemp(prefix="agentbake-oracle-bench-"))
    task_dir = (args.task or write_task(work / "task")).resolve()
    task = load_task(task_dir)
    image = resolve_image(args.image)
    load_start = os.getloadavg()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)

    api = docker.APIClient(version="auto")
    attrs = api.inspect_image(image)
    labels = attrs["Config"].get("Labels") or {}
    user, workdir = labels.get("dev.agentbake.user", "agent"), labels.get("dev.agentbake.dir.workdir", "/")
    solve = (task_dir / "solution" / "solve.sh").read_text()
    test = (task_dir / "tests" / "test.sh").read_text()

    probe = Probe()
    probe.install()
    cli_args = ["run", args.image, "--task", str(task_dir), "--oracle", "--out", str(work / "cli")]
    floor, cli_wall, cli_cpu, results = [], [], [], []
    with Runner(RunnerConfig(image=image, oracle=True, out_dir=work / "runner")) as runner:
        floor_rollout(api, image, user, workdir, solve, test)  # warm-up: first-use costs on every side
        run_cli(cli_args)
        runner.run(task)
        probe.runs.clear()
        for index in range(args.runs):
            floor.append(floor_rollout(api, image, user, workdir, solve, test))
            wall, cpu = run_cli(cli_args)
            cli_wall.append(wall)
            cli_cpu.append(cpu)
            with probe.rollout(keep_sample=index == 0):
                result = runner.run(task)
            if not result.ok or result.reward != 1.0:
                sys.exit(f"the oracle rollout did not pass: {result.status} {result.error}")
            results.append(result)

    help_runs = [run_cli(["run", "--help"]) for _ in range(max(5, args.runs))]
    version_runs = [run_cli(["--version"]) for _ in range(max(5, args.runs))]

    pool_args = (api, image, user, workdir, solve, test)
    started = time.perf_counter()
    with ThreadPoolExecutor(args.concurrent) as pool:
        list(pool.map(lambda _: floor_rollout(*pool_args), range(args.batch)))
    floor_batch = time.perf_counter() - started
    batch_args = ["rollout", args.image, "--oracle", "--tasks", str(task_dir), "-k", str(args.batch)]
    batch_wall, _ = run_cli([*batch_args, "-n", str(args.concurrent), "--out", str(work / "batch")])
    load_end = os.getloadavg()

    f50, c50, totals = med(floor), med(cli_wall), [r.timings["total"] for r in results]
    help_wall, help_cpu = [w for w, _ in help_runs], [c for _, c in help_runs]
    print(f"# Oracle rollout latency (commit {commit.stdout.strip()}, {image}, {args.runs} runs each, seconds)\n")
    print(f"load average at start {load_start[0]:.1f}, at end {load_end[0]:.1f} ({os.cpu_count()} cores)\n")
    print("| what | p50 | min | n |\n|---|---|---|---|")
    for name, values in (
        ("floor: raw docker-py create+start+exec solve+exec test+remove", floor),
        ("CLI `agentbake run --oracle` end to end (wall)", cli_wall),
        ("CLI `agentbake run --oracle` CPU (user+sys)", cli_cpu),
        ("runner: `Runner.run` total (in process)", totals),
        ("`agentbake run --help` wall", help_wall),
        ("`agentbake run --help` CPU", help_cpu),
        ("`agentbake --version` CPU (python + click)", [c for _, c in version_runs]),
    ):
        print(f"| {name} | {med(values):.3f} | {min(values):.3f} | {len(values)} |")
    print(
        f"\n**CLI / floor: {c50 / f50:.2f}x** (goal <= 1.5x); runner total / floor: {med(totals) / f50:.2f}x; "
        f"runner total p50 {med(totals):.3f} s (goal <= 0.9 s)"
    )
    print(f"`run --help` imports: {', '.join(help_imports()) or 'none of ' + ', '.join(HEAVY_MODULES)}\n")

    print("## Runner phases (medians per rollout)\n")
    print("| phase | s | engine requests | waiting on engine (s) | harness execs | exec s |\n|---|---|---|---|---|---|")
    phases = [p for p in results[0].timings if p not in ("ready", "total")]
    for phase in [*phases, "(outside phases)"]:
        seconds = f"{med([r.timings.get(phase, 0.0) for r in results]):.3f}" if phase in phases else "-"
        counts = [probe.median(phase, key) for key in ("requests", "requests_s", "execs", "execs_s")]
        print(f"| {phase} | {seconds} | {counts[0]:.0f} | {counts[1]:.3f} | {counts[2]:.0f} | {counts[3]:.3f} |")
    requests = [sum(phase.get("requests", 0) for phase in run.values()) for run in probe.runs]
    print(f"| ready (create -> agent running) | {med([r.timings['ready'] for r in results]):.3f} | | | | |")
    print(f"| **total** | {med(totals):.3f} | {med(requests):.0f} | | | |")

    print("\n## One rollout's engine requests and commands, by phase\n")
    for phase, calls in probe.sample.items():
        counted = Counter(calls)
        print(f"- {phase}: " + "; ".join(f"{n}x {call}" if n > 1 else call for call, n in counted.items()))

    print(f"\n## Throughput: {args.batch} oracle rollouts, {args.concurrent} at once\n")
    print("| what | wall (s) | rollouts/min |\n|---|---|---|")
    print(f"| floor, {args.concurrent} threads | {floor_batch:.1f} | {args.batch / floor_batch * 60:.0f} |")
    batch_name = f"`agentbake rollout --oracle -k {args.batch} -n {args.concurrent}`"
    print(f"| {batch_name} | {batch_wall:.1f} | {args.batch / batch_wall * 60:.0f} |")
    print(f"\nbatch / floor throughput: {floor_batch / batch_wall:.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
