"""The verifier's own sandbox, through the real engine: services the agent left listening answer the tests from a
snapshot of its sandbox (and nothing of the agent reaches that snapshot's reward), separate mode's fresh sandbox
sees the artifacts and nothing else of the agent, `--verifier-mode separate` forces it, remote backends refuse it,
and `agentbake gc` removes what a killed runner left (the verifier's container, the snapshot image)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.errors import TaskError
from agentbake.runner.docker import gc, labels
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.remote.image_facts import ImageFacts
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxRequest
from agentbake.tasks import Task, load_task
from tests.runner.cli.test_commands import agentbake
from tests.runner.rollouts import leftovers, reward_if, write_task

pytestmark = pytest.mark.docker

TASKS = ("serves-http", "serves-and-forges", "separate-verifier", "separate-by-flag")
"""The task images this module builds (removed when it ends)."""
# The task image's python: Debian's slim image has none, the agent bundle's (read-only, mounted) serves here.
PYTHON = "PY=$(command -v python3 || echo /opt/agentbake/runtime/bin/python3)\n"
SERVE = (
    PYTHON
    + """echo hello > /app/index.html
cd /app
setsid "$PY" -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 < /dev/null &
setsid sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 < /dev/null &
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.05; done
"""
)
"""A TB2-shaped solution: a server left listening (detached) and a non-serving leftover."""
# test.sh asks the server for the page over bash's /dev/tcp (no curl in Debian's slim image).
ASK_SERVER = """ask() { exec 3<>/dev/tcp/127.0.0.1/8000 &&
  printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3; }
got=$(ask)
echo "$got" | head -1
"""


@pytest.fixture(scope="module", autouse=True)
def remove_task_images(engine: docker.DockerClient) -> Iterator[None]:
    yield
    for image in engine.images.list(filters={"label": "dev.agentbake.task.name"}):  # the runnable layers first
        if image.labels["dev.agentbake.task.name"] in TASKS:
            engine.images.remove(image.id, force=True)
    for name in TASKS:  # by tag: the task image itself may be another task's too (the same Dockerfile)
        for image in engine.images.list(name=f"agentbake-task/{name}"):
            for tag in image.tags:
                if tag.startswith(f"agentbake-task/{name}:"):
                    engine.images.remove(tag, force=True)


def debian_task(root: Path, name: str, *, solve: str, test: str, toml: str = "") -> Task:
    """A Terminal-Bench-shaped task: its own image from Debian (no USER, WORKDIR /app)."""
    task_dir = write_task(root, name, solve=solve, test=test, toml=toml)
    (task_dir / "environment").mkdir()
    (task_dir / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return load_task(task_dir)


def oracle(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, task: Task, out: Path, **config
) -> RolloutResult:
    with Runner(
        RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=out, **config), agent_backend
    ) as r:
        return r.run(task)


def no_verifier_sandboxes_left(engine: docker.DockerClient, result: RolloutResult) -> None:
    """Nothing of the rollout is left: its sandboxes (the verifier's too) and the snapshot image are removed."""
    assert not leftovers(engine, result.rollout_id)
    assert not engine.images.list(filters={"label": f"{labels.ROLLOUT}={result.rollout_id}"})


def test_a_server_the_agent_left_answers_the_tests_from_a_snapshot(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, engine: docker.DockerClient, tmp_path: Path
) -> None:
    test = ASK_SERVER + reward_if("case $got in *hello*) true ;; *) false ;; esac")
    test += "grep -l 'http[.]server' /proc/[0-9]*/cmdline 2>/dev/null | wc -l\n"  # the server's process, from here
    result = oracle(built_images, agent_backend, debian_task(tmp_path, "serves-http", solve=SERVE, test=test), tmp_path)
    assert (result.status, result.reward) == (Status.OK, 1.0), (result.error, result.notes)
    kept = [n for n in result.notes if n.startswith("kept the agent's services")]
    assert len(kept) == 1 and kept[0].count(" port ") == 1 and "port 8000" in kept[0], result.notes
    assert "'sh'" not in kept[0], "the leftover that serves nothing must die"
    stdout = (result.out_dir / "verifier" / "stdout.txt").read_text().split()
    assert stdout[:3] == ["HTTP/1.0", "200", "OK"]
    assert stdout[-1] == "0", "the snapshot has a pid namespace of its own: the server runs in the agent's"
    assert result.timings["verifier_sandbox"] > 0
    no_verifier_sandboxes_left(engine, result)


# A root process writing the reward in a loop: it stands for a root agent's service (setup.sh runs as root; the
# agent itself is uid 1000 in these images). The agent leaves a server, so the verifier runs in a snapshot.
FORGER = """setsid sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' \\
  >/dev/null 2>&1 < /dev/null &
"""


def test_a_root_service_in_the_agents_sandbox_cannot_write_the_snapshots_reward(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    test = ASK_SERVER + "sleep 1\n" + reward_if("[ -f /app/solved.txt ]") + "sleep 0.5\n"
    task_dir = write_task(tmp_path, "serves-and-forges", solve=SERVE.replace("/app", "$HOME"), test=test, setup=FORGER)
    result = oracle(built_images, agent_backend, load_task(task_dir), tmp_path)
    assert (result.status, result.reward) == (Status.OK, 0.0), (result.error, result.notes)
    assert any(n.startswith("kept the agent's services") for n in result.notes), result.notes
    assert (result.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "0\n"


SEPARATE_SOLVE = """echo answer > /app/answer.txt
echo secret > /tmp/left-by-agent
ln -s /tests/expected.txt /app/agents-link
setsid sleep 1000 >/dev/null 2>&1 < /dev/null &
"""
# What the verifier may see of the agent: the workdir's files, nothing else (no /tmp file, no process, no link).
SEPARATE_TEST = """alive=$(for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done |
  grep -c '^sleep 1000')
echo "agent processes: $alive"
""" + reward_if(
    '[ "$(cat /app/answer.txt)" = answer ] && [ ! -e /tmp/left-by-agent ] && [ ! -L /app/agents-link ] '
    '&& [ ! -L /app/hooks-link ] && [ -f /app/collected.txt ] && [ "$alive" = 0 ]'
)
COLLECT = """[verifier]
environment_mode = "separate"

[[verifier.collect]]
command = "ls /app > /app/collected.txt && ln -s /tests/expected.txt /app/hooks-link"
user = "root"

[[verifier.collect]]
command = "exit 7"
"""


def test_a_separate_verifier_sees_the_workdir_and_nothing_else_of_the_agent(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = debian_task(tmp_path, "separate-verifier", solve=SEPARATE_SOLVE, test=SEPARATE_TEST, toml=COLLECT)
    (task.tests_dir / "expected.txt").write_text("answer\n")
    result = oracle(built_images, agent_backend, task, tmp_path)
    said = (result.out_dir / "verifier" / "stdout.txt").read_text()
    assert (result.status, result.reward) == (Status.OK, 1.0), (result.error, result.notes, said)
    assert "agent processes: 0" in said
    # The agent's link went in its own sandbox; the root hook's (any owner) in the verifier's, after the copy.
    removed = (result.out_dir / "verifier" / "removed-links.txt").read_text()
    assert '"/app/hooks-link" -> "/tests/expected.txt"' in removed
    assert any("'exit 7' exited 7" in n for n in result.notes), result.notes
    assert not any(n.startswith("kept the agent's services") for n in result.notes)
    no_verifier_sandboxes_left(engine, result)


def test_verifier_mode_separate_on_the_command_line_forces_it(
    built_images: dict[str, BuildResult], tmp_path: Path
) -> None:
    test = reward_if("[ -f /app/answer.txt ] && [ ! -e /tmp/left-by-agent ]")
    task = debian_task(tmp_path, "separate-by-flag", solve=SEPARATE_SOLVE, test=test)
    assert task.verifier_mode == "shared"
    args = ["run", built_images["claude-code"].tag, "--path", str(task.path), "--oracle", "--json"]
    shared = agentbake(*args, "-o", str(tmp_path / "shared"))
    separate = agentbake(*args, "-o", str(tmp_path / "separate"), "--verifier-mode", "separate")
    assert shared.returncode == 0 and separate.returncode == 0, shared.stderr + separate.stderr
    assert json.loads(shared.stdout)["reward"] == 0.0  # the agent's /tmp file is there in its own sandbox
    assert json.loads(separate.stdout)["reward"] == 1.0, separate.stdout


def test_separate_mode_on_a_backend_that_cannot_make_the_verifiers_sandbox_is_refused(
    built_images: dict[str, BuildResult], engine: docker.DockerClient, tmp_path: Path
) -> None:
    image = built_images["claude-code"].tag
    facts = ImageFacts.from_labels(image, engine.api.inspect_image(image)["Config"]["Labels"])
    hf = HFBackend(HFConfig(image=image), image_facts=facts)
    task = load_task(write_task(tmp_path, "sep", solve="true\n", test=reward_if("true"), toml=COLLECT))
    refused = pytest.raises(TaskError, match=r"environment_mode = \"separate\".*the hf backend cannot make")
    with Runner(RunnerConfig(image=image, oracle=True), hf) as runner, refused:
        runner.run(task)
    shared = load_task(write_task(tmp_path, "shared", solve="true\n", test=reward_if("true")))
    refused = pytest.raises(TaskError, match=r"--verifier-mode separate .* --backend docker")
    with Runner(RunnerConfig(image=image, oracle=True, verifier_mode="separate"), hf) as runner, refused:
        runner.run(shared)


def test_gc_removes_a_verifiers_sandbox_and_its_snapshot_image(
    built_images: dict[str, BuildResult], engine: docker.DockerClient, tmp_path: Path
) -> None:
    # Expired at once: what a runner killed before removing them leaves (gc removes it, nothing else of others').
    backend = DockerBackend(DockerConfig(memory_mb=256, cpus=1, runtime_dir=tmp_path / "rt", ttl_s=0.5))
    try:
        agent = backend.create(SandboxRequest(image=built_images["claude-code"].tag, rollout_id="gc-own-verifier"))
        snapshot = backend.snapshot(agent)
        image = engine.api.inspect_container(snapshot.sandbox_id)["Image"]
        assert engine.api.inspect_image(image)["Config"]["Labels"][labels.ROLLOUT] == "gc-own-verifier"
        time.sleep(1)
        found = gc.collect(engine.api, runtime_dir=tmp_path / "rt")
        kinds = {(f.kind, f.rollout) for f in found if f.rollout == "gc-own-verifier" and f.removed}
        assert kinds == {("container", "gc-own-verifier"), ("image", "gc-own-verifier")}, found
        assert not engine.images.list(filters={"label": f"{labels.ROLLOUT}=gc-own-verifier"})
    finally:
        backend.close()
