"""The race after test.sh: how often a process test.sh left behind gets a forged reward counted, old guard vs new.

    .venv/bin/python bench/runner/race_bench.py [--runs 100] [--image agentbake/claude-code:latest]

In one hardened Docker sandbox (DockerBackend, 1 CPU, as the harness runs), all in one run: the daemon attack (agent
code the root test.sh imports, `python3 -c 'import helper'` from the workdir, prepares reward 1 in /logs/verifier and
leaves a detached daemon that renames it over test.sh's 0 the moment test.sh has ended, zombie included; it polls
every 10 ms, or spins) through `commands.root_test_sh`, the one command a root test.sh runs in, read as the harness
reads it (`verifier.guard_from`, then `verifier.reward_from`). Against:
- the old guard: test.sh run by the shell, `kill -STOP -1` the moment it is reaped, then the kill (main before the
  subreaper; what the harness still does, with a note, in a sandbox without python);
- the new guard: test.sh under the subreaper wrapper (`harness/subreaper.py`), whose exit status says whether a
  process test.sh started outlived it; then the reward is withheld.
Each with the machine idle and beside two CPU burners on the host (`sh -c 'while :; do :; done'`). A race is won
when the reward counted is the forged 1.
"""

from __future__ import annotations

import argparse
import os
import time

from agentbake.runner import DockerBackend, DockerConfig, SandboxRequest
from agentbake.runner.harness.commands import root_test_sh
from agentbake.runner.harness.upload import hand_over, tar_archive
from agentbake.runner.harness.verifier import PROCESSES, RewardError, guard_from, parse_reward_files, reward_from
from agentbake.runner.sandbox import SandboxHandle
from tests.runner.probes import IMPORTS_HELPER, forging_helper
from tests.runner.rollouts import cpu_burners

WAITS = {"polls 10 ms": 0.01, "spins": 0.0}
LOADS = {"idle": 0, "2 CPU burners": 2}


def root(handle: SandboxHandle, cmd: list[str] | str, cwd: str | None = None) -> str:
    result = handle.exec(cmd, user="root", timeout=120, cwd=cwd)
    assert result.exit_code == 0, result
    return result.stdout


def race(handle: SandboxHandle, keep: str, workdir: str, python: str | None) -> tuple[bool, bool]:
    """One race through `root_test_sh` (python None: the old guard): (won, withheld)."""
    root(handle, "rm -rf /tests /logs && mkdir -p -m 700 /tests && mkdir -p /logs/verifier")
    tests = hand_over(handle, tar_archive({"/tests/test.sh": IMPORTS_HELPER.encode()}), "/root/t.tar", in_env=True)
    command = root_test_sh("true", python).render()
    ran = handle.exec(
        ["sh", "-c", command.script, "sh", keep, tests.unpack()], envs=tests.envs, cwd=workdir, user="root", timeout=120
    )
    parts = command.split(ran.stdout)
    assert "daemon started" in parts["test.sh"], ran  # the attack ran
    guard = guard_from(parts["status"])
    try:
        reward = reward_from(parse_reward_files(parts["rewards"]))
    except RewardError:
        reward = None
    return guard.withheld is None and reward == 1.0, guard.withheld is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--image", default="agentbake/claude-code:latest")
    args = parser.parse_args()
    backend = DockerBackend(DockerConfig(cpus=1, memory_mb=512))
    started = time.monotonic()
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    try:
        with backend.create(SandboxRequest(image=args.image, rollout_id="race-bench")) as handle:
            assert handle.python is not None, "the image has no dev.agentbake.python label"
            keep = " ".join(root(handle, ["sh", "-c", PROCESSES]).split())
            workdir = handle.paths["workdir"]
            rows = []
            for load, burners in LOADS.items():
                with cpu_burners(burners):
                    for wait, pause in WAITS.items():
                        root(handle, ["bash", "-c", forging_helper(pause)], cwd=workdir)
                        old = [race(handle, keep, workdir, None) for _ in range(args.runs)]
                        new = [race(handle, keep, workdir, handle.python) for _ in range(args.runs)]
                        rows.append((wait, load, old, new))
        print(f"\nraces won by the daemon (its forged reward 1 counted), of {args.runs} each")
        print(f"{'daemon':<13}{'load':<15}{'old guard (stop+kill)':>23}{'new guard (subreaper)':>23}{'withheld':>10}")
        for wait, load, old, new in rows:
            won_old, won_new = sum(w for w, _ in old), sum(w for w, _ in new)
            print(f"{wait:<13}{load:<15}{won_old:>23}{won_new:>23}{sum(h for _, h in new):>10}")
        print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(f"wall: {time.monotonic() - started:.0f} s")
    finally:
        backend.close()


if __name__ == "__main__":
    main()
