"""Oracle rollout latency: the CLI and the runner beside the engine's floor, phase by phase.

    .venv/bin/python bench/runner/oracle_bench.py                      # ~4 min on 2 loaded cores
    .venv/bin/python bench/runner/oracle_bench.py --runs 5 --batch 16 --task DIR
    .venv/bin/python bench/runner/oracle_bench.py --compare before=/path/to/other/checkout

All in one run, on one Harbor-layout task (a throwaway one unless --task), the claude-code image:
- floor in-process: raw docker-py low-level calls, create + start + exec solve.sh (as the image's user) + exec
  test.sh (as root) + remove, network none, timed inside this already-running Python (the engine's cost of
  the same work, nothing of ours);
- floor as a process: the same calls as a script, `python -c` (this interpreter) that imports docker, makes
  its client and runs them, timed end to end from here as the CLI is (what a user's raw docker-py script
  costs: interpreter start, imports, the engine's version request, the calls);
- CLI: `agentbake run claude-code --task T --oracle` end to end, in a subprocess (imports, catalog
  resolution, engine connection, the rollout, result writing);
- runner: `Runner.run` in a long-lived subprocess, per phase: seconds, engine round trips (HTTP requests to
  the engine, by endpoint), the harness's commands (execs) and the time spent waiting on the engine;
- throughput: `agentbake rollout --oracle -k N -n C` in rollouts/min beside the floor run C at once;
- start-up: `agentbake run --help` (wall and CPU) and which heavy modules it imports.
`--compare LABEL=DIR` measures another checkout of agentbake (e.g. the commit before a change) the same way,
with this venv's python and DIR first on its path, in the same rounds. Floor, CLIs and runners run
interleaved one by one so the machine's load hits them alike; medians.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parents[2]
HEAVY_MODULES = ("docker", "pydantic", "rich", "asyncio", "starlette", "httpx", "jinja2", "agentbake.export")
RUN_CLI = "import sys\nfrom agentbake.cli import main\nsys.argv[0] = 'agentbake'\nmain()"

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


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


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


# The floor as a script of its own: the same function, run by a fresh interpreter with its own client.
FLOOR_PROCESS = (
    "import sys, time\nimport docker\n"
    + inspect.getsource(floor_rollout)
    + "floor_rollout(docker.APIClient(version='auto'), *sys.argv[1:])\n"
)


def floor_process(image: str, user: str, workdir: str, solve: str, test: str) -> float:
    """Wall seconds of FLOOR_PROCESS end to end (python start-up, imports, client, the calls, exit)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", FLOOR_PROCESS, image, user, workdir, solve, test], capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"the floor as a process failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return wall


# -- one checkout of agentbake: its CLI and its runner ----------------------------------------------


@dataclass
class Variant:
    """A checkout of agentbake measured in this run: its CLI and a runner probe, both on its code."""

    label: str
    source: Path
    cli_wall: list[float] = field(default_factory=list)
    cli_cpu: list[float] = field(default_factory=list)
    help_wall: list[float] = field(default_factory=list)
    help_cpu: list[float] = field(default_factory=list)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    batch_wall: float = float("nan")
    probe: subprocess.Popen[str] | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONPATH=str(self.source))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode cached
        return env

    def cli(self, args: list[str]) -> tuple[float, float]:
        """Wall and CPU seconds (user + system) of `agentbake ARGS`; exits the bench when it fails."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", RUN_CLI, *args], capture_output=True, text=True, env=self.env(), cwd=self.source
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.exit(
                f"{self.label}: agentbake {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
            )
        return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime

    def start_probe(self, image: str, task_dir: Path, out: Path) -> None:
        self.probe = subprocess.Popen(
            [sys.executable, __file__, "--probe", image, str(task_dir), str(out)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env(),
            cwd=self.source,
        )

    def rollout(self) -> dict[str, Any]:
        assert self.probe is not None and self.probe.stdin is not None and self.probe.stdout is not None
        self.probe.stdin.write("run\n")
        self.probe.stdin.flush()
        line = self.probe.stdout.readline()
        if not line:
            sys.exit(f"{self.label}: the runner probe ended")
        return json.loads(line)

    def stop_probe(self) -> None:
        if self.probe is not None and self.probe.stdin is not None:
            self.probe.stdin.close()
            self.probe.wait(60)

    def help_imports(self) -> list[str]:
        code = (
            "import sys; from agentbake.cli import main\n"
            "try: main(['run', '--help'])\nexcept SystemExit: pass\n"
            f"print('imported:', *(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=self.env(), cwd="/")
        return done.stdout.splitlines()[-1].split()[1:]  # the help's own lines come before

    def phase(self, name: str, key: str) -> float:
        return med([r["phases"].get(name, {}).get(key, 0.0) for r in self.rollouts])

    def timing(self, name: str) -> float:
        return med([r["timings"].get(name, 0.0) for r in self.rollouts])


# -- the runner probe (a subprocess on one checkout's code) -----------------------------------------


class Probe:
    """Engine requests and harness commands per phase of the rollout running in this process."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.calls: dict[str, list[str]] = defaultdict(list)

    def note(self, kind: str, label: str, seconds: float) -> None:
        phase = self.phase or "(outside phases)"
        self.counts[phase][kind] += 1
        self.counts[phase][f"{kind}_s"] += seconds
        self.calls[phase].append(label)

    def install(self) -> None:
        """Wrap the engine client's `send`, the sandbox's `exec` and the runner's phases (this process only)."""
        from agentbake.runner.docker.sandbox import DockerSandbox
        from agentbake.runner.result import Timings

        probe = self
        send, exec_, phase = docker.APIClient.send, DockerSandbox.exec, Timings.phase

        def timed_send(client: docker.APIClient, request: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return send(client, request, **kwargs)
            finally:
                parts = ["{id}" if len(p) >= 32 else p for p in request.path_url.split("?")[0].split("/")]
                endpoint = "/".join(parts[2:] if parts[1].startswith("v1.") else parts[1:])
                probe.note("requests", f"{request.method} /{endpoint}", time.perf_counter() - started)

        def timed_exec(sandbox: DockerSandbox, cmd: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return exec_(sandbox, cmd, *args, **kwargs)
            finally:
                text = cmd if isinstance(cmd, str) else " ".join(map(str, cmd))
                probe.note("execs", f"exec {text[:60]!r}", time.perf_counter() - started)

        @contextmanager
        def named_phase(timings: Timings, name: str) -> Iterator[None]:
            outer, probe.phase = probe.phase, name
            try:
                with phase(timings, name):
                    yield
            finally:
                probe.phase = outer

        docker.APIClient.send = timed_send  # type: ignore[method-assign]
        DockerSandbox.exec = timed_exec  # type: ignore[method-assign]
        Timings.phase = named_phase  # type: ignore[method-assign]


def serve_probe(image: str, task_dir: str, out: str) -> None:
    """Run one instrumented oracle rollout per line read on stdin; one JSON line each on stdout."""
    from agentbake.runner.runner import Runner
    from agentbake.runner.runner_config import RunnerConfig
    from agentbake.tasks import load_task

    reports = os.fdopen(os.dup(1), "w")  # the JSON lines; anything else printed goes to stderr
    sys.stdout = sys.stderr
    probe = Probe()
    probe.install()
    task = load_task(Path(task_dir))
    with Runner(RunnerConfig(image=image, oracle=True, out_dir=Path(out))) as runner:
        runner.run(task)  # first use: image facts, engine connections, /etc/passwd reads
        for _ in sys.stdin:
            probe.counts.clear()
            probe.calls.clear()
            result = runner.run(task)
            if not result.ok or result.reward != 1.0:
                sys.exit(f"the oracle rollout did not pass: {result.status} {result.error}")
            report = {
                "timings": result.timings,
                "phases": {phase: dict(counts) for phase, counts in probe.counts.items()},
                "calls": {phase: dict(Counter(calls)) for phase, calls in probe.calls.items()},
            }
            print(json.dumps(report), file=reports, flush=True)


# -- report -----------------------------------------------------------------------------------------


def report(
    variants: list[Variant],
    floor: list[float],
    floor_procs: list[float],
    floor_batch: float,
    args: argparse.Namespace,
) -> None:
    f50, p50 = med(floor), med(floor_procs)
    print("| what | " + " | ".join(v.label for v in variants) + " |")
    print("|---" * (len(variants) + 1) + "|")

    def row(name: str, values: list[str]) -> None:
        print(f"| {name} | " + " | ".join(values) + " |")

    row(
        "floor in-process p50 (s): raw docker-py create+start+exec solve+exec test+remove, timed in a running Python",
        [f"{f50:.3f}"] * len(variants),
    )
    row(
        "floor as a process p50 (s): `python -c` import docker + client + the same calls, end to end",
        [f"{p50:.3f}"] * len(variants),
    )
    row("CLI `agentbake run --oracle` p50 wall (s)", [f"{med(v.cli_wall):.3f}" for v in variants])
    row("CLI CPU p50 (s, user+sys)", [f"{med(v.cli_cpu):.3f}" for v in variants])
    row("**CLI / floor in-process** (goal <= 1.5x)", [f"**{med(v.cli_wall) / f50:.2f}x**" for v in variants])
    row("**CLI / floor as a process** (goal <= 1.5x)", [f"**{med(v.cli_wall) / p50:.2f}x**" for v in variants])
    row("runner total p50 (s) (goal <= 0.9 s on a quiet machine)", [f"{v.timing('total'):.3f}" for v in variants])
    row("runner total / floor in-process", [f"{v.timing('total') / f50:.2f}x" for v in variants])
    row("ready: create -> agent running p50 (s)", [f"{v.timing('ready'):.3f}" for v in variants])
    requests = [med([sum(p.get("requests", 0) for p in r["phases"].values()) for r in v.rollouts]) for v in variants]
    execs = [med([sum(p.get("execs", 0) for p in r["phases"].values()) for r in v.rollouts]) for v in variants]
    row("engine requests per rollout (floor: 9)", [f"{n:.0f}" for n in requests])
    row("harness execs per rollout (floor: 2)", [f"{n:.0f}" for n in execs])
    row("`agentbake run --help` p50 wall (s)", [f"{med(v.help_wall):.3f}" for v in variants])
    row("`agentbake run --help` p50 CPU (s)", [f"{med(v.help_cpu):.3f}" for v in variants])
    row("`run --help` imports", [", ".join(v.help_imports()) or "-" for v in variants])
    batch = f"`rollout --oracle -k {args.batch} -n {args.concurrent}` rollouts/min"
    row(batch, [f"{args.batch / v.batch_wall * 60:.0f}" for v in variants])
    row(f"floor, {args.concurrent} threads: rollouts/min", [f"{args.batch / floor_batch * 60:.0f}"] * len(variants))
    row("batch throughput / floor's", [f"{floor_batch / v.batch_wall:.2f}" for v in variants])

    print("\n## Runner phases (medians per rollout: seconds / engine requests / harness execs)\n")
    phases = list(dict.fromkeys(p for v in variants for p in v.rollouts[0]["timings"] if p not in ("ready", "total")))
    print("| phase | " + " | ".join(v.label for v in variants) + " |")
    print("|---" * (len(variants) + 1) + "|")
    for phase in phases:
        cells = [
            f"{v.timing(phase):.3f} / {v.phase(phase, 'requests'):.0f} / {v.phase(phase, 'execs'):.0f}"
            for v in variants
        ]
        row(phase, cells)

    for v in variants:
        print(f"\n## {v.label}: one rollout's engine requests and commands, by phase\n")
        for phase, calls in v.rollouts[0]["calls"].items():
            print(f"- {phase}: " + "; ".join(f"{n}x {call}" if n > 1 else call for call, n in calls.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="sequential rollouts of each kind (interleaved)")
    parser.add_argument("--batch", type=int, default=32, help="rollouts in the throughput batch (-k)")
    parser.add_argument("--concurrent", type=int, default=8, help="rollouts at once in the batch (-n)")
    parser.add_argument("--task", type=Path, help="a Harbor-layout task with solution/ (default: a throwaway one)")
    parser.add_argument("--image", default="claude-code", help="catalog name or tag")
    parser.add_argument("--compare", action="append", default=[], metavar="LABEL=DIR", help="another checkout")
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)  # IMAGE TASK_DIR OUT: the runner subprocess
    args = parser.parse_args()
    if args.probe:
        serve_probe(*args.probe)
        return

    from agentbake.runner.images import resolve_image

    work = Path(tempfile.mkdtemp(prefix="agentbake-oracle-bench-"))
    task_dir = (args.task or write_task(work / "task")).resolve()
    image = resolve_image(args.image)
    load_start = os.getloadavg()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    variants = [Variant(f"this ({commit.stdout.strip()})", ROOT)]
    for spec in args.compare:
        label, _, directory = spec.partition("=")
        variants.append(Variant(label, Path(directory).resolve()))

    api = docker.APIClient(version="auto")
    labels = api.inspect_image(image)["Config"].get("Labels") or {}
    user, workdir = labels.get("dev.agentbake.user", "agent"), labels.get("dev.agentbake.dir.workdir", "/")
    floor_args = (
        api,
        image,
        user,
        workdir,
        (task_dir / "solution" / "solve.sh").read_text(),
        (task_dir / "tests" / "test.sh").read_text(),
    )
    for index, variant in enumerate(variants):
        variant.start_probe(image, task_dir, work / f"runner{index}")
    cli_args = ["run", args.image, "--task", str(task_dir), "--oracle", "--out", str(work / "cli")]
    floor_rollout(*floor_args)  # warm-up: first-use costs on every side
    floor_process(*floor_args[1:])
    for variant in variants:
        variant.cli(cli_args)
    floor: list[float] = []
    floor_procs: list[float] = []
    try:
        for _ in range(args.runs):
            floor.append(floor_rollout(*floor_args))
            floor_procs.append(floor_process(*floor_args[1:]))
            for variant in variants:
                wall, cpu = variant.cli(cli_args)
                variant.cli_wall.append(wall)
                variant.cli_cpu.append(cpu)
                variant.rollouts.append(variant.rollout())
                wall, cpu = variant.cli(["run", "--help"])
                variant.help_wall.append(wall)
                variant.help_cpu.append(cpu)
    finally:
        for variant in variants:
            variant.stop_probe()

    started = time.perf_counter()
    with ThreadPoolExecutor(args.concurrent) as pool:
        list(pool.map(lambda _: floor_rollout(*floor_args), range(args.batch)))
    floor_batch = time.perf_counter() - started
    batch_args = ["rollout", args.image, "--oracle", "--tasks", str(task_dir), "-k", str(args.batch)]
    for index, variant in enumerate(variants):
        variant.batch_wall, _ = variant.cli([*batch_args, "-n", str(args.concurrent), "--out", str(work / f"b{index}")])
    load_end = os.getloadavg()

    print(f"# Oracle rollout latency ({image}, {args.runs} runs each, interleaved; seconds)\n")
    print(f"load average at start {load_start[0]:.1f}, at end {load_end[0]:.1f} ({os.cpu_count()} cores)\n")
    report(variants, floor, floor_procs, floor_batch, args)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
