"""The verifier phase (agentbake/runner/verifier.py): Harbor's reward precedence, and the agent's files as
hostile input to the verifier, run through the real engine with `--oracle` (solve.sh is the attack).

The reward rules are checked on their own first (no engine); each attack then runs as a task in one
batch, and must end with reward 0 or its precise status."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.verifier import RewardError, parse_reward_files, reward_from
from agentbake.tasks import load_task
from tests.runner.rollouts import copy_example, write_task


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
# A process that spins on test.sh's end still wins now and then (it sees test.sh reaped before the stop
# reaches it): bench/verifier_bench.py measures how often; one that polls loses every time measured.
DAEMON_WAITS = {
    "later": "sleep 1",  # rewrites a second after
    "polls": 'while kill -0 "$1" 2>/dev/null; do sleep 0.01; done',  # as soon as test.sh is gone (10 ms)
}
IMPORTS_HELPER = "python3 -c 'import helper'\necho 0 > /logs/verifier/reward.txt\n"

ATTACKS = {
    # name: (solve.sh, test.sh or None for the fix-failing-test example's, expected status, reward)
    **{
        f"verifier-daemon-{name}": (DAEMON_HELPER.replace("{wait}", wait), IMPORTS_HELPER, Status.OK, 0.0)
        for name, wait in DAEMON_WAITS.items()
    },
    "reward-json-over-txt": (
        "true\n",
        "echo 1 > /logs/verifier/reward.txt\necho '{\"reward\": 0.25}' > /logs/verifier/reward.json\n",
        Status.OK,
        0.25,
    ),
    "reward-symlink": ("true\n", "echo 1 > /tmp/r; ln -s /tmp/r /logs/verifier/reward.txt\n", Status.VERIFIER_ERROR, 0),
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
        Status.OK,
        0.0,
    ),
    "calc-reads-the-answers": (
        "echo 'print(open(\"/tests/expected.json\").read())' > calc/__init__.py\n",
        None,
        Status.OK,
        0.0,
    ),
}


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
        assert (result.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "0\n"
    if name == "reward-symlink":
        assert "/logs/verifier/reward.txt is a symlink" in result.error
    if name.startswith("calc-"):
        assert (result.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "0\n"
    if name == "calc-reads-the-answers":
        assert "Permission denied: '/tests/expected.json'" in (result.out_dir / "verifier" / "stderr.txt").read_text()
