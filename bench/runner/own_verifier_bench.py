"""What the verifier's own sandbox costs per rollout: oracle rollouts of one small task (a server the solution leaves
listening, a workdir of a few files) in the three places the verifier can run, interleaved run by run.

    .venv/bin/python bench/runner/own_verifier_bench.py [--runs 5] [--image agentbake/claude-code:<hash12>]

- shared: the solution's server is stopped like any leftover (`--verifier-mode` unset, no listener): the verifier
  runs in the agent's sandbox, the baseline;
- snapshot: the server kept for the tests (shared mode with a listener): `docker commit`, a container sharing the
  agent's network namespace, its first root step;
- separate: `--verifier-mode separate`: a fresh container, the workdir handed over, its first root step.
Printed: p50 seconds over the runs of the rollout's phases that differ: `stop` (a kept service costs a kill round
as the agent's user), `verifier_sandbox` (making B), `verifier`, `teardown` (B and a snapshot's image removed with
the rollout's sandbox) and `total`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from agentbake.runner import DockerBackend, DockerConfig, Runner, RunnerConfig
from agentbake.tasks import load_task

SERVE = """cd "$HOME" && for i in 1 2 3 4 5; do echo "file $i" > "file$i.txt"; done
setsid python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 < /dev/null &
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.05; done
"""
NO_SERVER = 'cd "$HOME" && for i in 1 2 3 4 5; do echo "file $i" > "file$i.txt"; done\n'
TEST = "echo 1 > /logs/verifier/reward.txt\n"


def task(root: Path, name: str, solve: str) -> Path:
    folder = root / name
    (folder / "solution").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "instruction.md").write_text("Serve the files.\n")
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\n" + TEST)
    (folder / "task.toml").write_text("")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--image", default="agentbake/claude-code:latest")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="own-verifier-bench-"))
    cases = {
        "shared": (load_task(task(root, "plain", NO_SERVER)), None),
        "snapshot": (load_task(task(root, "serves", SERVE)), None),
        "separate": (load_task(task(root, "separate", NO_SERVER)), "separate"),
    }
    seconds: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    backend = DockerBackend(DockerConfig(memory_mb=512, cpus=1))
    try:
        for _ in range(args.runs):
            for name, (one, mode) in cases.items():
                config = RunnerConfig(image=args.image, oracle=True, out_dir=root / "out", verifier_mode=mode)
                with Runner(config, backend) as runner:
                    result = runner.run(one)
                assert result.reward == 1.0, (name, result.error, result.notes)
                seconds[name].append(result.timings)
    finally:
        backend.close()
    print(f"image {args.image}, {args.runs} oracle rollouts each, p50 seconds")
    keys = ("agent", "stop", "verifier_sandbox", "verifier", "teardown", "total")
    print(f"{'verifier runs in':<18}" + "".join(f"{key:>18}" for key in keys))
    for name, runs in seconds.items():
        p50 = [statistics.median(r.get(key, 0.0) for r in runs) for key in keys]
        print(f"{name:<18}" + "".join(f"{value:>18.3f}" for value in p50))


if __name__ == "__main__":
    main()
