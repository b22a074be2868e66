"""The harness's steps on the real engine with the claude-code image, driven by `--oracle` (solve.sh as the
agent, no model): rewards, every status, tamper-proof rewards, and teardown after a failure.

Each group of tasks runs as one batch (concurrently), so the module costs a few sandboxes' time."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.errors import TaskError
from agentbake.runner.docker import labels
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.harness.workdir import MAX_PRINTED_DIFF_BYTES
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox.packed import MAX_PACKED_BYTES
from agentbake.tasks import discover_tasks, load_task
from tests.runner.faulty_engine import FaultyEngine
from tests.runner.rollouts import EXAMPLE_TASKS, EXAMPLES, copy_example, leftovers, reward_if, write_task

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def backend(engine: docker.DockerClient) -> Iterator[DockerBackend]:
    backend = DockerBackend(DockerConfig(memory_mb=512, cpus=1))
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def runner(built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path_factory) -> Iterator[Runner]:
    out = tmp_path_factory.mktemp("out")
    with Runner(RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=out), backend) as runner:
        yield runner


def test_oracle_solves_every_example_task(runner: Runner) -> None:
    completed = list(runner.iter_batch(discover_tasks([EXAMPLES]), concurrency=3))  # in the order they end
    results = sorted(completed, key=lambda r: r.task)
    assert [r.task for r in results] == sorted(EXAMPLE_TASKS)
    for result in results:
        assert (result.status, result.reward, result.exit_code, result.agent) == (Status.OK, 1.0, 0, "oracle"), result
        out = result.out_dir
        assert json.loads((out / "result.json").read_text()) == json.loads(json.dumps(result.summary()))
        assert (out / "agent" / "oracle.log").is_file() and (out / "verifier" / "stdout.txt").is_file()
        assert result.timings["ready"] < result.timings["total"]
        assert result.agent_version == "2.1.332"  # the image's agent, though the oracle ran
    diffs = {r.task: (r.out_dir / "workdir.diff").read_text() for r in results}
    assert "+++ b/hello.txt" in diffs["write-file"] and "+Hello, agentbake!" in diffs["write-file"]
    assert "-    return sum(values) / (len(values) + 1)" in diffs["fix-failing-test"]
    assert "+++ b/report/summary.md" in diffs["multi-step-report"]
    # Written by the verifier, read back from /logs/verifier
    report = next(r for r in results if r.task == "multi-step-report")
    assert json.loads((report.out_dir / "verifier" / "logs" / "reward.json").read_text())["reward"] == 1.0


FAILING = {
    # name: (task.toml, setup.sh, solve.sh, test.sh, expected status, expected reward)
    "wrong-solution": ("", None, "echo 'Hello, world' > hello.txt\n", None, Status.OK, 0.0),
    "crash-after-solving": ("", None, "echo 'Hello, agentbake!' > hello.txt\nexit 3\n", None, Status.AGENT_ERROR, 1.0),
    "timeout": ("[agent]\ntimeout_sec = 2\n", None, "sleep 60\n", None, Status.AGENT_TIMEOUT, 0.0),
    "oom": (
        "[environment]\nmemory_mb = 96\n",
        None,
        "python3 -c \"x = b'1' * (512 << 20)\"\n",
        None,
        Status.OOM,
        0.0,
    ),
    "setup-fails": (
        "",
        "echo broken >&2\nexit 7\n",
        "echo 'Hello, agentbake!' > hello.txt\n",
        None,
        Status.SETUP_ERROR,
        0.0,
    ),
    "verifier-timeout": ("[verifier]\ntimeout_sec = 2\n", None, "true\n", "sleep 60\n", Status.VERIFIER_TIMEOUT, 0.0),
    "verifier-garbage": ("", None, "true\n", "echo banana > /logs/verifier/reward.txt\n", Status.VERIFIER_ERROR, 0.0),
    "verifier-writes-no-reward": ("", None, "touch done\n", "[ -f done ]\n", Status.VERIFIER_ERROR, 0.0),
}


@pytest.fixture(scope="module")
def failing_results(runner: Runner, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("failing")
    tasks = []
    for name, (toml, setup, solve, test, _, _) in FAILING.items():
        if test is None:  # the write-file task's verifier
            path = copy_example(root, "write-file", name, solve=solve)
            (path / "task.toml").write_text(toml)
            if setup is not None:
                (path / "environment").mkdir()
                (path / "environment" / "setup.sh").write_text(setup)
        else:
            path = write_task(root, name, solve=solve, test=test, setup=setup, toml=toml)
        tasks.append(load_task(path))
    return {r.task: r for r in runner.run_batch(tasks, concurrency=4)}


@pytest.mark.parametrize("name", FAILING)
def test_each_failure_has_its_status_and_the_verifier_still_judges(failing_results: dict, name: str) -> None:
    result = failing_results[name]
    *_, status, reward = FAILING[name]
    assert (result.status, result.reward) == (status, reward), result.error
    assert (result.error is None) == (status is Status.OK)
    if status in (Status.AGENT_ERROR, Status.AGENT_TIMEOUT, Status.OOM):
        assert (result.out_dir / "verifier" / "stdout.txt").exists(), "the verifier must run after agent failures"
    if name == "crash-after-solving":
        assert result.exit_code == 3
    if name == "timeout":
        assert result.timings["agent"] < 10 and result.exit_code is None
    if name == "setup-fails":
        assert "exited 7" in result.error and "broken" in (result.out_dir / "setup.log").read_text()
        assert not (result.out_dir / "verifier" / "stdout.txt").exists()
    if name == "verifier-garbage":
        assert "/logs/verifier/reward.txt: expected a number, got 'banana'" in result.error
    if name == "verifier-writes-no-reward":  # exit 0 is no reward (Harbor): neither file is a verifier_error
        assert result.verifier_exit_code == 0 and "tests/test.sh wrote no reward" in result.error


# Plants reward files wherever it can and leaves a detached process rewriting them, beating a heartbeat.
TAMPER = r"""
for d in /logs/verifier /logs /tests "$HOME/logs/verifier" "$HOME" /tmp "$PWD"; do
  mkdir -p "$d" 2>/dev/null
  echo 1 > "$d/reward.txt" 2>/dev/null
  echo '{"reward": 1}' > "$d/reward.json" 2>/dev/null
done
setsid sh -c 'n=0; while :; do n=$((n+1)); echo $n > /tmp/heartbeat
  for d in /logs/verifier /logs /tests "$HOME/logs/verifier"; do
    mkdir -p $d 2>/dev/null; echo 1 > $d/reward.txt 2>/dev/null; done; sleep 0.05; done' </dev/null >/dev/null 2>&1 &
until [ "$(cat /tmp/heartbeat 2>/dev/null)" -ge 2 ] 2>/dev/null; do sleep 0.01; done  # it runs (under load too)
"""
UNSOLVED_VERIFIER = """a=$(cat /tmp/heartbeat); sleep 0.5; b=$(cat /tmp/heartbeat)
echo "heartbeat $a $b"
""" + reward_if("[ -f solved.txt ]")


def test_planted_reward_files_and_a_rewriting_process_get_no_reward(runner: Runner, tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, "tamper", solve=TAMPER, test=UNSOLVED_VERIFIER))
    result = runner.run(task)
    assert (result.status, result.reward, result.verifier_exit_code) == (Status.OK, 0.0, 0)
    _, before, after = (result.out_dir / "verifier" / "stdout.txt").read_text().split()
    assert int(before) > 1 and before == after, "the agent's background process outlived the agent"
    assert (result.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "0\n"
    assert not (result.out_dir / "verifier" / "logs" / "reward.json").exists()


BIG_LINES = 60_000  # ~1.3 MiB of diff: past MAX_PRINTED_DIFF_BYTES, read from its file
DIFF_SOLVE = {
    "small-diff": "printf 'caf\\351 \\377 bytes\\nno newline at the end' > small.txt\n",
    "big-diff": f"seq -f 'line %g of a diff past the printed size' {BIG_LINES} > big.txt\n",
}


def test_the_workdir_diff_is_kept_byte_for_byte_printed_or_read(runner: Runner, tmp_path: Path) -> None:
    tasks = [load_task(write_task(tmp_path, n, solve=s, test=reward_if("true"))) for n, s in DIFF_SOLVE.items()]
    results = {r.task: r for r in runner.run_batch(tasks, concurrency=2)}
    small = (results["small-diff"].out_dir / "workdir.diff").read_bytes()
    assert b"+caf\xe9 \xff bytes\n+no newline at the end\n\\ No newline at end of file\n" in small
    big = (results["big-diff"].out_dir / "workdir.diff").read_bytes()
    assert len(big) > MAX_PRINTED_DIFF_BYTES and big.endswith(
        f"+line {BIG_LINES} of a diff past the printed size\n".encode()
    )
    assert big.count(b"\n+line ") == BIG_LINES
    assert all(r.status is Status.OK and not r.notes for r in results.values()), results


# Logs packed by the stop step and the verifier's command (up to MAX_PACKED_BYTES), or copied by the engine (larger);
# 20 MB of test.sh output before the reward lines and the pack, which must stay in its command's kept output.
SEQ_SMALL, SEQ_LARGE = 20_000, 500_000  # ~110 KB, ~3.4 MB of `seq`
LOG_TASKS = {
    "small-logs": (
        f'seq {SEQ_SMALL} > "$HOME/logs/agent/seq.txt"\n',
        f"head -c 20000000 /dev/zero | tr '\\0' y; seq {SEQ_SMALL} > /logs/verifier/seq.txt\n" + reward_if("true"),
    ),
    "large-logs": (
        f'seq {SEQ_LARGE} > "$HOME/logs/agent/seq.txt"\n',
        f"seq {SEQ_LARGE} > /logs/verifier/seq.txt\n" + reward_if("true"),
    ),
}


def test_logs_are_collected_whole_packed_or_copied(runner: Runner, tmp_path: Path) -> None:
    assert len("".join(f"{n}\n" for n in range(1, SEQ_LARGE + 1))) > MAX_PACKED_BYTES
    tasks = [load_task(write_task(tmp_path, n, solve=solve, test=test)) for n, (solve, test) in LOG_TASKS.items()]
    results = {r.task: r for r in runner.run_batch(tasks, concurrency=2)}
    for name, count in (("small-logs", SEQ_SMALL), ("large-logs", SEQ_LARGE)):
        result = results[name]
        assert (result.status, result.reward, result.notes) == (Status.OK, 1.0, []), (name, result.error)
        expected = "".join(f"{n}\n" for n in range(1, count + 1))
        assert (result.out_dir / "agent" / "seq.txt").read_text() == expected
        assert (result.out_dir / "verifier" / "logs" / "seq.txt").read_text() == expected
        assert (result.out_dir / "agent" / "oracle.log").is_file()
    assert "bytes of output cut here" in (results["small-logs"].out_dir / "verifier" / "stdout.txt").read_text()


def test_a_sandbox_lost_mid_rollout_is_a_sandbox_error_and_leaves_nothing(
    runner: Runner, engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = load_task(write_task(tmp_path, "lost-sandbox", solve="sleep 60\n", test="true\n"))
    stop = threading.Event()

    def remove_it() -> None:  # the engine loses the container while the agent runs
        while not stop.is_set():
            for container in engine.containers.list(filters={"label": labels.ROLLOUT}, ignore_removed=True):
                if container.labels[labels.ROLLOUT].startswith("lost-sandbox-"):
                    time.sleep(1)
                    container.remove(force=True)
                    return
            time.sleep(0.1)

    remover = threading.Thread(target=remove_it, daemon=True)
    remover.start()
    try:
        result = runner.run(task)
    finally:
        stop.set()
        remover.join()
    assert result.status is Status.SANDBOX_ERROR and result.reward == 0.0
    assert "lost-sandbox" in result.error or "sandbox" in result.error
    assert (result.out_dir / "result.json").is_file()
    assert leftovers(engine, "lost-sandbox-") == []


def test_oracle_without_a_solution_is_refused_before_any_sandbox(runner: Runner, tmp_path: Path) -> None:
    path = write_task(tmp_path, "no-solution", solve="true\n", test="true\n")
    (path / "solution" / "solve.sh").unlink()
    with pytest.raises(TaskError, match=f"{path}: no solution/solve.sh; --oracle runs"):
        runner.run(load_task(path))


def test_when_teardown_fails_too_the_original_error_is_the_one_reported(
    built_images: dict[str, BuildResult], engine: docker.DockerClient, tmp_path: Path
) -> None:
    """The engine fails the harness's first command, then the removal of the sandbox."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the fault-injecting relay needs a unix-socket engine, DOCKER_HOST is {host}")
    first_command_then_removal = r"^(POST /v[\d.]+/exec/[^/]+/start|DELETE /v[\d.]+/containers/)"
    with FaultyEngine(tmp_path / "engine.sock", host.removeprefix("unix://"), first_command_then_removal, 2) as proxy:
        backend = DockerBackend(DockerConfig(memory_mb=256), base_url=proxy.url)
        config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
        with Runner(config, backend) as runner:
            result = runner.run(load_task(EXAMPLES / "write-file"))
    left = engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}={result.rollout_id}"})
    for container in left:  # the engine answers again: what the failed teardown left goes now
        container.remove(force=True)
    assert proxy.matched >= 2 and proxy.failures == 0
    assert result.status is Status.SANDBOX_ERROR
    assert "cannot run a command in" in result.error and "injected by the test" in result.error
    assert "remove" not in result.error, "the teardown's failure replaced the original error"
    assert len(left) == 1, "the removal did fail (else this test shows nothing)"
