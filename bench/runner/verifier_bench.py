"""The verifier phase's guards: what they cost (the races they win are `race_bench.py`'s).

    .venv/bin/python bench/runner/verifier_bench.py [--runs 30] [--image agentbake/claude-code:latest]

In one hardened Docker sandbox (DockerBackend, 1 CPU, as the harness runs), measured in the same run:
- costs: test.sh under its guard (`verifier.guarded_test_sh`: the subreaper on the image's python, then the stop
  and the kill) with a trivial test.sh, beside the same without the guard (stop and kill only) and `bash test.sh`
  alone; `KILL_THEN_READ_REWARDS` beside a plain `cat` of the reward; `commands.root_test_sh` (with its unpack of
  tests/) beside `bash test.sh` + `cat` (two commands);
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
from agentbake.runner.harness.verifier import KILL_THEN_READ_REWARDS, PROCESSES, REMOVE_ESCAPING_LINKS, guarded_test_sh
from agentbake.runner.sandbox import SandboxHandle

TESTS_TAR = "/root/tests.tar"  # what the one command unpacks first (and removes)


def one_command(handle: SandboxHandle, keep: str, test_sh: str) -> tuple[Rendered, list[str]]:
    """`commands.root_test_sh` with `test_sh` in the archive it unpacks (written now, not timed)."""
    tests = hand_over(handle, tar_archive({"/tests/test.sh": test_sh.encode()}), TESTS_TAR, in_env=False)
    command = root_test_sh("true", handle.python).render()
    return command, ["sh", "-c", command.script, "sh", keep, tests.unpack()]


def root(handle: SandboxHandle, cmd: list[str] | str) -> str:
    result = handle.exec(cmd, user="root", timeout=120)
    assert result.exit_code == 0, result
    return result.stdout


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
            guarded = f"{guarded_test_sh(handle.python)}exit $rc\n"
            unguarded = f"{guarded_test_sh(None)}exit $rc\n"
            trivial = "echo 1 > /logs/verifier/reward.txt\n"
            root(handle, "mkdir -p /tests /logs/verifier")
            handle.write_text("/tests/test.sh", trivial, user="root")
            costs: dict[str, list[float]] = {k: [] for k in ("bash", "guarded", "unguarded", "cat", "kill+read", "one")}
            for _ in range(args.runs):
                costs["bash"].append(timed(handle, ["bash", "/tests/test.sh"]))
                costs["guarded"].append(timed(handle, ["sh", "-c", guarded, "sh", keep]))
                costs["unguarded"].append(timed(handle, ["sh", "-c", unguarded, "sh", keep]))
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
            print(
                f"run test.sh:        {p50(costs['guarded'])} guarded  vs {p50(costs['unguarded'])} stop + kill "
                f"only, {p50(costs['bash'])} bash test.sh alone"
            )
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
