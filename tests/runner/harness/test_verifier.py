"""The verifier phase (agentbake/runner/harness/verifier.py): Harbor's reward precedence, and the agent's files as
hostile input to the verifier, run through the real engine with `--oracle` (solve.sh is the attack).

The reward rules are checked on their own first (no engine); each attack then runs as a task in one
batch, and must end with reward 0 or its precise status."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.harness.verifier import RewardError, network_failure, parse_reward_files, reward_from
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.tasks import load_task
from tests.runner.probes import IMPORTS_HELPER, forging_helper
from tests.runner.rollouts import copy_example, cpu_burners, reward_if, write_task


def rewards(json_line: str, txt_line: str) -> float:
    return reward_from(parse_reward_files(f"reward.json {json_line}\nreward.txt {txt_line}\n"))


def test_reward_json_comes_first_then_reward_txt() -> None:
    assert rewards('file {"reward": 0.25, "tests": 3} ', "file 1 ") == 0.25
    assert rewards("absent", "file  0.5  ") == 0.5
    assert rewards('file {"tests_passed": 3} ', "file 0.75 ") == 0.75  # no "reward" key: reward.txt's
    assert rewards('file {"reward": 1} ', "absent") == 1.0


@pytest.mark.parametrize(
    ("json_line", "txt_line", "message"),
    [
        ("absent", "absent", "tests/test.sh wrote no reward: neither /logs/verifier/reward.json nor"),
        ('file {"tests_passed": 3} ', "absent", '/logs/verifier/reward.json: no "reward" key (and no reward.txt)'),
        ('file {"reward": "1"} ', "file 1 ", '/logs/verifier/reward.json: expected a number in "reward", got "1"'),
        ('file {"reward": true} ', "absent", 'expected a number in "reward", got true'),
        ("file [1] ", "absent", '/logs/verifier/reward.json: expected a JSON object like {"reward": 1.0}'),
        ("absent", "file banana ", "/logs/verifier/reward.txt: expected a number, got 'banana'"),
        ("absent", "file  ", "/logs/verifier/reward.txt: expected a number, got ''"),
        ("absent", "file nan ", "/logs/verifier/reward.txt: expected a finite number, got 'nan'"),
        ("absent", "symlink", "/logs/verifier/reward.txt is a symlink: a reward is read only from a regular file"),
        ("symlink", "file 0 ", "/logs/verifier/reward.json is a symlink"),
        ("absent", "special", "/logs/verifier/reward.txt is not a regular file"),
        ("absent", "hardlinked", "/logs/verifier/reward.txt has other hard links"),
        ("baddir", "baddir", "/logs/verifier was replaced (a symlink, or removed) while the verifier ran"),
    ],
)
def test_what_is_no_reward(json_line: str, txt_line: str, message: str) -> None:
    with pytest.raises(RewardError, match=re.escape(message)):
        rewards(json_line, txt_line)


def test_nothing_printed_is_no_reward() -> None:
    with pytest.raises(RewardError, match="could not read /logs/verifier"):
        reward_from(parse_reward_files(""))


# -- attacks through the real engine --------------------------------------------------------------

# Agent code that the root verifier imports (as `python3 -c 'import helper'` from the workdir would):
# a detached process that waits for test.sh to end ({wait}) and then writes reward 1.
DAEMON_HELPER = r"""cat > helper.py <<'PY'
import os, subprocess
test_sh = os.getppid()
subprocess.Popen(["setsid", "sh", "-c", '{wait}; echo 1 > /logs/verifier/reward.txt', "sh", str(test_sh)],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("daemon started")
PY
"""
# Whenever it writes, such a process outlived test.sh: its reward is withheld (bench/runner/race_bench.py counts the
# races it would win against the stop and kill alone).
DAEMON_WAITS = {
    "later": "sleep 1",  # rewrites a second after
    "polls": 'while kill -0 "$1" 2>/dev/null; do sleep 0.01; done',  # as soon as test.sh is gone (10 ms)
}
OUTLIVED = "that tests/test.sh started outlived it"
# A test.sh that starts helpers (a child, a detached daemon) and stops them, waiting for their end, before it ends.
STOPS_ITS_HELPERS = """sleep 30 & p=$!
( setsid sh -c 'echo $$ > /tmp/daemon; exec sleep 30' & )
while [ ! -s /tmp/daemon ]; do sleep 0.01; done; d=$(cat /tmp/daemon)
kill $p; wait $p
kill $d; while kill -0 $d 2>/dev/null; do sleep 0.01; done
echo 1 > /logs/verifier/reward.txt
"""

# test.sh as `[verifier] user`: prints who it is, then earns 1 when it can read /tests and its HOME is its own.
WHO_AM_I = """id -un; echo "$HOME"; ls -ld /tests | cut -d' ' -f3
""" + reward_if('[ -r /tests/test.sh ] && [ "$HOME" = "$(getent passwd "$(id -un)" | cut -d: -f6)" ]')
USERS = {
    # name: (task.toml, test.sh, expected status, reward)
    "as-agent": ('[verifier]\nuser = "agent"\n', WHO_AM_I, Status.OK, 1.0),
    "as-nobody-uid": ("[verifier]\nuser = 65534\n", WHO_AM_I, Status.OK, 1.0),
    "as-root-by-name": ('[verifier]\nuser = "root"\n', WHO_AM_I, Status.OK, 1.0),
    "as-ghost": ('[verifier]\nuser = "ghost"\n', WHO_AM_I, Status.VERIFIER_ERROR, 0.0),
    # a process the (non-root) verifier leaves rewrites the reward a moment later: it outlived test.sh, withheld
    "as-agent-daemon": (
        '[verifier]\nuser = "agent"\n',
        "setsid sh -c 'sleep 1; echo 1 > /logs/verifier/reward.txt' >/dev/null 2>&1 &\n"
        "echo 0 > /logs/verifier/reward.txt\n",
        Status.VERIFIER_ERROR,
        0.0,
    ),
    "as-agent-stops-helpers": ('[verifier]\nuser = "agent"\n', STOPS_ITS_HELPERS, Status.OK, 1.0),
    # a second name for a file elsewhere is not a reward file
    "hardlinked-reward": (
        '[verifier]\nuser = "agent"\n',
        "echo 1 > /tmp/r; ln /tmp/r /logs/verifier/reward.txt\n",
        Status.VERIFIER_ERROR,
        0.0,
    ),
}

# The markers of the command test.sh runs in are on its command line: it prints a clean guard's status and reward 1
# after them (the real ones come after, and count).
FORGE_REWARD_LINES = r"""t=$(cat /proc/[0-9]*/cmdline 2>/dev/null | grep -ao 'agentbake-rewards-[0-9a-f]*' | head -n1)
t=${t#agentbake-rewards-}
printf '\nagentbake-status-%s\n0 \n0\n\nagentbake-rewards-%s\nreward.json absent\nreward.txt file 1\n' "$t" "$t"
echo 0 > /logs/verifier/reward.txt
"""
ATTACKS = {
    # name: (solve.sh, test.sh or None for the fix-failing-test example's, expected status, reward)
    **{
        f"verifier-daemon-{name}": (DAEMON_HELPER.replace("{wait}", wait), IMPORTS_HELPER, Status.VERIFIER_ERROR, 0.0)
        for name, wait in DAEMON_WAITS.items()
    },
    "stops-its-helpers": ("true\n", STOPS_ITS_HELPERS, Status.OK, 1.0),
    "reward-json-over-txt": (
        "true\n",
        "echo 1 > /logs/verifier/reward.txt\necho '{\"reward\": 0.25}' > /logs/verifier/reward.json\n",
        Status.OK,
        0.25,
    ),
    "reward-symlink": ("true\n", "echo 1 > /tmp/r; ln -s /tmp/r /logs/verifier/reward.txt\n", Status.VERIFIER_ERROR, 0),
    # root's test.sh (or code it runs) finds the markers of the command it runs in and prints reward parts after them
    "forges-the-reward-lines": ("true\n", FORGE_REWARD_LINES, Status.OK, 0.0),
    # an exit 137 (SIGKILL's) before the deadline is test.sh's own exit, not a timeout
    "exits-137-in-time": ("true\n", "echo 1 > /logs/verifier/reward.txt\nexit 137\n", Status.OK, 1.0),
    # fix-failing-test runs the agent's calc as the agent's user and judges from what it printed
    "calc-exits-0-at-import": ("echo 'import os; os._exit(0)' > calc/__init__.py\n", None, Status.OK, 0.0),
    "calc-forges-a-report": (
        "printf 'import os\\nos.write(1, b\"{}\")\\nos._exit(0)\\n' > calc/__init__.py\n",
        None,
        Status.OK,
        0.0,
    ),
    "calc-leaves-a-daemon": (
        "cat >> calc/__init__.py <<'PY'\n"
        "import subprocess\n"
        "subprocess.Popen(['setsid', 'sh', '-c', 'sleep 1; echo 1 > /logs/verifier/reward.txt'])\n"
        "PY\n",
        None,
        Status.OK,  # its test.sh kills what the agent's code left before it ends: nothing outlives it
        0.0,
    ),
    "calc-reads-the-answers": (
        "echo 'print(open(\"/tests/expected.json\").read())' > calc/__init__.py\n",
        None,
        Status.OK,
        0.0,
    ),
}


@pytest.mark.docker
def test_the_verifier_user_runs_test_sh_and_owns_tests_and_its_log_dir(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    tasks = [
        load_task(write_task(tmp_path, name, solve="true\n", test=test, toml=toml))
        for name, (toml, test, *_) in USERS.items()
    ]
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
    with Runner(config, backend) as runner:
        results = {r.task: r for r in runner.run_batch(tasks, concurrency=3)}
    for name, (*_, status, reward) in USERS.items():
        assert (results[name].status, results[name].reward) == (status, reward), (name, results[name].error)
    said = {
        name: (results[name].out_dir / "verifier" / "stdout.txt").read_text().split()
        for name in USERS
        if name.startswith("as-") and name != "as-ghost"
    }
    assert said["as-agent"] == ["agent", "/home/agent", "agent"]
    assert said["as-nobody-uid"] == ["nobody", "/nonexistent", "nobody"]
    assert said["as-root-by-name"] == ["root", "/root", "root"]
    assert "[verifier] user 'ghost': no such user in the sandbox's image" in results["as-ghost"].error
    assert OUTLIVED in results["as-agent-daemon"].error, results["as-agent-daemon"].error
    assert not (results["as-ghost"].out_dir / "verifier" / "stdout.txt").exists(), "test.sh ran as someone else"
    assert "/logs/verifier/reward.txt has other hard links" in results["hardlinked-reward"].error


@pytest.fixture(scope="module")
def attack_results(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, RolloutResult]]:
    root = tmp_path_factory.mktemp("attacks")
    tasks = []
    for name, (solve, test, _, _) in ATTACKS.items():
        if test is None:
            path = copy_example(root, "fix-failing-test", name, solve=solve)
        else:
            path = write_task(root, name, solve=solve, test=test)
        tasks.append(load_task(path))
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=root / "out")
    with Runner(config, backend) as runner:
        yield {r.task: r for r in runner.run_batch(tasks, concurrency=4)}


@pytest.mark.docker
@pytest.mark.parametrize("name", ATTACKS)
def test_each_attack_ends_with_no_reward_or_its_status(attack_results: dict[str, RolloutResult], name: str) -> None:
    result = attack_results[name]
    *_, status, reward = ATTACKS[name]
    assert (result.status, result.reward) == (status, reward), result.error
    stdout = (result.out_dir / "verifier" / "stdout.txt").read_text()
    if name.startswith("verifier-daemon"):
        assert "daemon started" in stdout, "the attack did not run"
        # the daemon, named: sh, or setsid when the guard looked before setsid had become sh (under load)
        assert OUTLIVED in result.error and ("(sh" in result.error or "(setsid" in result.error), result.error
    if name == "forges-the-reward-lines":
        assert "\nagentbake-rewards-" in stdout and "reward.txt file 1" in stdout, "the attack did not run"
    if name == "exits-137-in-time":
        assert result.verifier_exit_code == 137
    if name == "reward-symlink":
        assert "/logs/verifier/reward.txt is a symlink" in result.error
    if name.startswith("calc-"):
        assert (result.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "0\n"
    if name == "calc-reads-the-answers":
        assert "Permission denied: '/tests/expected.json'" in (result.out_dir / "verifier" / "stderr.txt").read_text()


@pytest.mark.docker
def test_a_daemon_that_outlives_test_sh_never_has_its_reward_counted_under_load(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    """The daemon attack (agent code the root verifier imports leaves a detached process that renames a prepared
    reward 1 over test.sh's 0 the moment test.sh has ended), polling every 10 ms and spinning, beside two CPU burners
    on the host: not one forged reward, each withheld with its status and the daemon named."""
    waits = {"polls": 0.01, "spins": 0}
    tasks = [
        load_task(write_task(tmp_path, f"forges-{name}-{i}", solve=forging_helper(pause), test=IMPORTS_HELPER))
        for name, pause in waits.items()
        for i in range(10)
    ]
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
    with cpu_burners(2), Runner(config, backend) as runner:
        results = runner.run_batch(tasks, concurrency=4)
    assert len(results) == len(tasks)
    assert [r.task for r in results if r.reward != 0] == [], "forged"
    for result in results:
        assert result.status is Status.VERIFIER_ERROR, (result.task, result.status, result.error)
        assert f"1 process {OUTLIVED} (python3)" in result.error, result.error
        assert "daemon started" in (result.out_dir / "verifier" / "stdout.txt").read_text(), "the attack did not run"


# -- the agent's symlinks -------------------------------------------------------------------------

# Links the agent leaves (dangling while it runs: /tests does not exist yet) that would lead a root
# verifier reading them to the hidden answer, or into /logs; and links a task may legitimately check.
PLANT_LINKS = r"""mkdir -p deep/er "$HOME/stash" /tmp/t /dev/shm/s
ln -s /tests/expected.txt answer.txt
ln -s ../../../../../../tests/expected.txt relative.txt
ln -s /proc/self/root/tests/expected.txt proc-root.txt
ln -s /proc/self/cwd/expected.txt proc-cwd.txt
ln -s /dev/fd/3 fd.txt
ln -s /logs/../tests/expected.txt dots.txt
ln -s //tests/./expected.txt slashes.txt
ln -s / root
ln -s root/tests/expected.txt via-root.txt
ln -s via-root.txt chain.txt
ln -s "$HOME/stash/hop" via-home.txt
ln -s /tests "$HOME/stash/hop"
ln -s /tmp/t/hop/expected.txt via-tmp.txt
ln -s /tests /tmp/t/hop
ln -s /dev/shm/s/r deep/er/via-shm.txt
ln -s /tests/expected.txt /dev/shm/s/r
ln -s /logs/verifier/reward.txt report.txt
ln -s loop-a loop-b
ln -s loop-b loop-a
ln -s /usr/bin/python3 python
ln -s ../answer-notes.md deep/notes.md
echo notes > answer-notes.md
ln -s /etc/hostname hostname
ln -s /lib/../tests/x usr-tests
"""
ESCAPING = {
    "answer.txt", "relative.txt", "proc-root.txt", "proc-cwd.txt", "fd.txt", "dots.txt", "slashes.txt", "root",
    "via-root.txt", "chain.txt", "via-home.txt", "~/stash/hop", "via-tmp.txt", "/tmp/t/hop", "deep/er/via-shm.txt",
    "/dev/shm/s/r", "report.txt", "loop-a", "loop-b",
}  # fmt: skip
# Reads every link the way a careless verifier would (cwd /tests for the cwd link, fd 3 open on the
# answer for the fd link) and prints LEAK for each one that yields the answer; the legit links must work.
READ_LINKS = r"""w=$PWD answer=$(cat /tests/expected.txt) leaks=0
leak() { echo "LEAK $1"; leaks=$((leaks + 1)); }
for f in answer.txt relative.txt proc-root.txt dots.txt slashes.txt via-root.txt chain.txt via-home.txt \
         via-tmp.txt deep/er/via-shm.txt; do
  [ "$(cat "$f" 2>/dev/null)" = "$answer" ] && leak "$f"
done
[ "$(cd /tests && cat "$w/proc-cwd.txt" 2>/dev/null)" = "$answer" ] && leak proc-cwd.txt
[ "$(cat fd.txt 2>/dev/null 3< /tests/expected.txt)" = "$answer" ] && leak fd.txt
[ -L python ] && ./python -c 'print("KEPT python")'
[ "$(cat deep/notes.md)" = notes ] && echo "KEPT deep/notes.md"
[ -L hostname ] && [ -L usr-tests ] && echo "KEPT hostname usr-tests"
if [ "$leaks" -gt 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


def symlink_task(root: Path) -> Path:
    task = write_task(root, "symlink-attacks", solve=PLANT_LINKS, test=READ_LINKS)
    (task / "tests" / "expected.txt").write_text("the hidden answer 42\n")
    return task


@pytest.mark.docker
def test_the_agents_links_into_tests_or_logs_are_removed_and_listed_and_others_kept(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
    with Runner(config, backend) as runner:
        result = runner.run(load_task(symlink_task(tmp_path)))
    assert (result.status, result.reward) == (Status.OK, 0.0), result.error
    stdout = (result.out_dir / "verifier" / "stdout.txt").read_text()
    assert "LEAK" not in stdout
    assert stdout.count("KEPT") == 3, stdout
    listed = (result.out_dir / "verifier" / "removed-links.txt").read_text().splitlines()
    removed = {json.loads(line.split(" -> ")[0]) for line in listed}
    workdir, home = "/home/agent/workdir/", "/home/agent/"
    expected = {name.replace("~/", home) if name[0] in "~/" else workdir + name for name in ESCAPING}
    assert removed == expected
    assert '"/home/agent/workdir/answer.txt" -> "/tests/expected.txt"' in listed
    assert f"removed {len(ESCAPING)} symlinks of the agent that led into /tests or /logs" in result.notes[0]


@pytest.mark.docker
def test_the_link_and_daemon_attacks_played_by_claude_code_earn_nothing(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    """The same attacks through the real Claude Code: the scripted model plays each solve.sh through its
    Bash tool, so the links and the helper module are made by the agent itself."""
    links = load_task(symlink_task(tmp_path))
    daemon = load_task(
        write_task(
            tmp_path, "daemon-attack", solve=DAEMON_HELPER.replace("{wait}", DAEMON_WAITS["polls"]), test=IMPORTS_HELPER
        )
    )
    config = RunnerConfig(image=built_images["claude-code"].tag, model="scripted", out_dir=tmp_path / "out")
    with Runner(config, backend) as runner:
        runner.start_scripted([links, daemon])
        results = {r.task: r for r in runner.run_batch([links, daemon], concurrency=2)}
    expected = {"symlink-attacks": Status.OK, "daemon-attack": Status.VERIFIER_ERROR}  # the daemon's: withheld
    for result in results.values():
        assert (result.status, result.reward, result.agent) == (expected[result.task], 0.0, "claude-code"), result.error
        assert result.turns >= 2, "the agent made no tool call"
    links_out = results["symlink-attacks"].out_dir
    assert "LEAK" not in (links_out / "verifier" / "stdout.txt").read_text()
    assert len((links_out / "verifier" / "removed-links.txt").read_text().splitlines()) == len(ESCAPING)
    daemon_out = results["daemon-attack"].out_dir
    assert "daemon started" in (daemon_out / "verifier" / "stdout.txt").read_text()
    assert OUTLIVED in results["daemon-attack"].error


# -- the verifier's network ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "curl: (6) Could not resolve host: astral.sh",
        "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
        "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving",
        "  error: Request failed after 3 retries: dns error: failed to lookup address information",
        "ConnectionError: Failed to establish a new connection: [Errno 101] Network is unreachable",
        # refused by the egress proxy (403): curl -f, urllib, uv, pip, apt
        "curl: (22) The requested URL returned error: 403",
        "urllib.error.HTTPError: HTTP Error 403: Forbidden",
        "  cause: tunnel error: unsuccessful",
        "ProxyError('Cannot connect to proxy.', OSError('Tunnel connection failed: 403 Forbidden'))",
        "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  403  Forbidden [IP: 127.0.0.1 80]",
    ],
)
def test_what_a_verifier_says_when_it_needs_a_network(line: str) -> None:
    assert network_failure(f"collecting...\n{line}\nmore") == line.strip()
    assert network_failure("FAILED test_outputs.py::test_answer - assert 3 == 4") is None


# The agent phase without a network (--agent-network none) and the verifier's legacy networks: the verifier
# fetches from PyPI (a package mirror) and earns 1 when it got there and the agent did not.
FETCH = "python3 -c \"import urllib.request; urllib.request.urlopen('https://pypi.org/simple/', timeout=20)\""
AGENT_FETCHES = (
    f"{FETCH} 2>/dev/null && echo online > net.txt || echo offline > net.txt\n"
    "echo $(ls /sys/class/net) > interfaces.txt\n"
)
VERIFIER_FETCHES = f"{FETCH} && echo fetched\n" + reward_if('[ "$(cat net.txt)" = offline ] && ' + FETCH)
NETWORK = {
    # name: (task.toml, --verifier-network, expected status, reward)
    "bridge": ("", "bridge", Status.OK, 1.0),
    "bridge-but-not-allowed": ("[environment]\nallow_internet = false\n", "bridge", Status.VERIFIER_ERROR, 0.0),
    "none": ("", "none", Status.VERIFIER_ERROR, 0.0),
}


@pytest.mark.docker
def test_the_verifier_gets_a_network_only_when_the_run_asks_and_the_task_allows_it(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    results = {}
    for mode in ("bridge", "none"):
        names = [name for name, (_, wanted, *_) in NETWORK.items() if wanted == mode]
        tasks = [
            load_task(write_task(tmp_path, name, solve=AGENT_FETCHES, test=VERIFIER_FETCHES, toml=NETWORK[name][0]))
            for name in names
        ]
        config = RunnerConfig(
            image=built_images["claude-code"].tag,
            oracle=True,
            out_dir=tmp_path / "out",
            agent_network="none",
            verifier_network=mode,
        )
        with Runner(config, backend) as runner:
            results |= {r.task: r for r in runner.run_batch(tasks, concurrency=2)}
    for name, (*_, status, reward) in NETWORK.items():
        result = results[name]
        assert (result.status, result.reward) == (status, reward), (name, result.error)
        diff = (result.out_dir / "workdir.diff").read_text()
        assert "+offline" in diff and "+lo\n" in diff, "the agent had a network"
    assert "fetched" in (results["bridge"].out_dir / "verifier" / "stdout.txt").read_text()
    for name in ("bridge-but-not-allowed", "none"):
        error = results[name].error
        assert error.startswith(
            "reward 0 not counted: the verifier ran without network (its network_mode is no-network"
        )
        assert "Temporary failure in name resolution" in error or "Network is unreachable" in error, error
