"""The verifier phase's guards: what they cost, and how often a process left behind by test.sh still wins.

    .venv/bin/python bench/runner/verifier_bench.py [--runs 30] [--image agentbake/claude-code:latest]

In one hardened Docker sandbox (DockerBackend, 1 CPU, as the harness runs), measured in the same run:
- races: a root process started by test.sh waits for test.sh's end, then writes reward 1 (test.sh wrote
  0). It polls every 10 ms, or spins. Against: the reward read by a separate command after test.sh (the
  harness before the guard), a /proc scan and kill in the same command (no stop), and `RUN_TEST_SH` (stop
  in one system call, then kill), and `commands.root_test_sh` (the same and the reward read in one
  command, as a root test.sh runs). The table counts the races the process won.
- costs: `RUN_TEST_SH` with a trivial test.sh beside `bash test.sh` alone; `KILL_THEN_READ_REWARDS` beside
  a plain `cat` of the reward; `commands.root_test_sh` (with its unpack of tests/) beside `bash
  test.sh` + `cat` (two commands);
  `REMOVE_ESCAPING_LINKS` with no agent links and with 1000 beside a plain
  `find / -type l -uid` listing; a sandbox able to join the verifier's network beside a plain one, and
  `connect_network()`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from agentbake.runner import DockerBackend, DockerConfig, SandboxRequest
from agentbake.runner.harness.commands import Rendered, root_test_sh
from agentbake.runner.harness.upload import hand_over, tar_archive
from agentbake.runner.harness.verifier import KILL_THEN_READ_REWARDS, PROCESSES, REMOVE_ESCAPING_LINKS, RUN_TEST_SH
from agentbake.runner.sandbox import SandboxHandle

WAITS = {
    "polls 10 ms": 'while kill -0 "$1" 2>/dev/null; do sleep 0.01; done',
    "spins": 'while kill -0 "$1" 2>/dev/null; do :; done',
}
NO_STOP = RUN_TEST_SH.replace("kill -STOP -1 2>/dev/null\n", "")
SEPARATE = "bash /tests/test.sh"  # the harness before the guard: test.sh alone, the reward read after
ONE_COMMAND = "root test.sh, kill and read"  # the harness's `commands.root_test_sh`
TESTS_TAR = "/root/tests.tar"  # what the one command unpacks first (and removes)


def one_command(handle: SandboxHandle, keep: str, test_sh: str) -> tuple[Rendered, list[str]]:
    """`commands.root_test_sh` with `test_sh` in the archive it unpacks (written now, not timed)."""
    tests = hand_over(handle, tar_archive({"/tests/test.sh": test_sh.encode()}), TESTS_TAR, in_env=False)
    command = root_test_sh("true").render()
    return command, ["sh", "-c", command.script, "sh", keep, tests.unpack()]


def root(handle: SandboxHandle, cmd: list[str] | str) -> str:
    result = handle.exec(cmd, user="root", timeout=120)
    assert result.exit_code == 0, result
    return result.stdout


def race(handle: SandboxHandle, keep: str, wait: str, runner: str) -> bool:
    """One race: True when the process left behind rewrote the reward before it was read."""
    test_sh = (
        f"t=$$; setsid sh -c '{wait}; echo 1 > /logs/verifier/reward.txt' sh \"$t\" >/dev/null 2>&1 &\n"
        "echo 0 > /logs/verifier/reward.txt\n"
    )
    root(handle, "rm -rf /tests /logs && mkdir -p /tests /logs/verifier")
    handle.write_text("/tests/test.sh", test_sh, user="root")
    if runner == ONE_COMMAND:  # reads the reward itself, in its part `rewards`
        command, argv = one_command(handle, keep, test_sh)
        read = command.split(root(handle, argv))["rewards"]
    else:
        handle.exec(["sh", "-c", runner, "sh", keep], user="root", timeout=120)
        read = root(handle, ["sh", "-c", KILL_THEN_READ_REWARDS, "sh", keep])
    return "reward.txt file 1" in read


def timed(handle: SandboxHandle, cmd: list[str] | str) -> float:
    started = time.perf_counter()
    root(handle, cmd)
    return time.perf_counter() - started


def timed_call(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def p50(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--image", default="agentbake/claude-code:latest")
    args = parser.parse_args()
    backend = DockerBackend(DockerConfig(cpus=1, memory_mb=512))
    try:
        with backend.create(SandboxRequest(image=args.image, rollout_id="verifier-bench")) as handle:
            keep = " ".join(root(handle, ["sh", "-c", PROCESSES]).split())
            print(f"races won by the process left behind, of {args.runs}")
            print(f"{'waits':<14}{'read after (before)':>22}{'kill, no stop':>16}{'stop + kill':>14}{'one (root)':>12}")
            for name, wait in WAITS.items():
                wins = [sum(race(handle, keep, wait, runner) for _ in range(args.runs)) for runner in (
                    f"{SEPARATE}", NO_STOP, RUN_TEST_SH, ONE_COMMAND)]  # fmt: skip
                print(f"{name:<14}{wins[0]:>22}{wins[1]:>16}{wins[2]:>14}{wins[3]:>12}")

            trivial = "echo 1 > /logs/verifier/reward.txt\n"
            handle.write_text("/tests/test.sh", trivial, user="root")
            costs: dict[str, list[float]] = {k: [] for k in ("bash", "wrapped", "cat", "kill+read", "one")}
            for _ in range(args.runs):
                costs["bash"].append(timed(handle, ["bash", "/tests/test.sh"]))
                costs["wrapped"].append(timed(handle, ["sh", "-c", RUN_TEST_SH, "sh", keep]))
                costs["cat"].append(timed(handle, ["cat", "/logs/verifier/reward.txt"]))
                costs["kill+read"].append(timed(handle, ["sh", "-c", KILL_THEN_READ_REWARDS, "sh", keep]))
                costs["one"].append(timed(handle, one_command(handle, keep, trivial)[1]))
            scan = ["sh", "-c", REMOVE_ESCAPING_LINKS, "sh", "1000", "/tests /logs", "/root/links"]
            listing = "find / \\( -path /proc -o -path /sys \\) -prune -o -type l -uid 1000 -print > /dev/null"
            links: dict[str, list[float]] = {k: [] for k in ("find 0", "scan 0", "find 1000", "scan 1000")}
            for _ in range(max(5, args.runs // 3)):
                links["find 0"].append(timed(handle, listing))
                links["scan 0"].append(timed(handle, scan))
            handle.exec("mkdir -p ~/many && cd ~/many && for i in $(seq 1000); do ln -s /etc/hostname l$i; done")
            for _ in range(max(5, args.runs // 3)):
                links["find 1000"].append(timed(handle, listing))
                links["scan 1000"].append(timed(handle, scan))
            print("\ncost per rollout (p50, each command one exec round trip)")
            print(f"run test.sh:        {p50(costs['wrapped'])} wrapped  vs {p50(costs['bash'])} bash test.sh alone")
            print(f"kill + read reward: {p50(costs['kill+read'])}          vs {p50(costs['cat'])} cat reward.txt")
            print(f"both in one (root): {p50(costs['one'])}          vs the two plain commands above")
            print(f"link scan, 0 links: {p50(links['scan 0'])}          vs {p50(links['find 0'])} find listing")
            print(f"link scan, 1000:    {p50(links['scan 1000'])}          vs {p50(links['find 1000'])} find listing")
        print("\nthe verifier's network (p50): a sandbox made able to join it, and joining it")
        plain, able, joined = [], [], []
        for i in range(max(5, args.runs // 3)):
            for wanted, times in ((False, plain), (True, able)):
                request = SandboxRequest(image=args.image, rollout_id=f"verifier-bench-{i}", verifier_network=wanted)
                started = time.perf_counter()
                with backend.create(request) as made:
                    times.append(time.perf_counter() - started)
                    if wanted:
                        joined.append(timed_call(made.connect_network))
        print(f"create (network none):            {p50(plain)}")
        print(f"create (verifier network, unjoined): {p50(able)}")
        print(f"connect_network():                 {p50(joined)}")
    finally:
        backend.close()


if __name__ == "__main__":
    main()
