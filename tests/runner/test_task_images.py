"""Tasks that bring their own image, run on the real engine: the two example tasks (environment/Dockerfile:
Debian with no python and a root-owned /app; Debian with python and pytest baked in) and a docker_image task
(an image built here, tagged with the task's name, as no registry is reachable): the oracle and the real
Claude Code with the scripted model get reward 1 on each (OpenCode and Pi too, on the image without
python); the sandbox has no network and a read-only agent bundle; the reward stays tamper-proof."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxRequest
from agentbake.tasks import Task, load_task
from agentbake.tasks.bundle import BUNDLE_GIT, BUNDLE_MOUNT
from tests.runner.cli.test_commands import agentbake
from tests.runner.harness.test_steps import TAMPER, UNSOLVED_VERIFIER
from tests.runner.harness.test_verifier import symlink_task
from tests.runner.rollouts import EXAMPLES, reward_if, write_task

pytestmark = pytest.mark.docker

IMAGE_TASKS = ("summarize-logs", "fix-inventory")
THROWAWAY_TASKS = {
    "prebuilt-notes",
    "tamper-image",
    "tb-shaped",
    "symlink-attacks",
    "no-fix",
    "exits-0-at-import",
    "leaves-a-daemon",
    "no-base64",
}
"""Tasks this module makes up: their images are removed when it ends."""
PREBUILT = "agentbake-test/prebuilt-notes:latest"
"""The docker_image task's image: built here and tagged with the task's name (nothing can be pulled)."""


@pytest.fixture(scope="module", autouse=True)
def remove_throwaway_images(engine: docker.DockerClient) -> Iterator[None]:
    """The images of this module's throwaway tasks (the examples' stay: the next run finds them cached)."""
    yield
    for image in engine.images.list(filters={"label": "dev.agentbake.task.name"}):
        if image.labels["dev.agentbake.task.name"] in THROWAWAY_TASKS:
            engine.images.remove(image.id, force=True)
    for name in THROWAWAY_TASKS:
        for image in engine.images.list(name=f"agentbake-task/{name}"):
            for tag in image.tags:
                if tag.startswith(f"agentbake-task/{name}:"):
                    engine.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def prebuilt(engine: docker.DockerClient, built_images: dict[str, BuildResult]) -> Iterator[str]:
    dockerfile = "FROM debian:bookworm-slim\nRUN useradd -u 1000 -m -s /bin/bash ubuntu\nWORKDIR /notes\n"
    engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=PREBUILT, rm=True)
    yield PREBUILT
    for image in engine.images.list(filters={"label": f"dev.agentbake.task.image={PREBUILT}"}):
        engine.images.remove(image.id, force=True)
    engine.images.remove(PREBUILT, force=True)


@pytest.fixture(scope="module")
def tasks(prebuilt: str, tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    """The two examples and a docker_image task, whose environment/ files are copied into the workdir and
    whose environment/setup.sh runs as root (it has no Dockerfile)."""
    root = tmp_path_factory.mktemp("image-tasks")
    notes = write_task(
        root,
        "prebuilt-notes",
        instruction="Append the line `reviewed` to /notes/todo.txt.\n",
        solve="echo reviewed >> todo.txt\n",
        test=reward_if('[ "$(cat /notes/todo.txt)" = "$(printf "buy milk\\nreviewed")" ] && [ -f /etc/setup-ran ]'),
        setup="touch /etc/setup-ran\n",  # only root can write there
        toml=f'[environment]\ndocker_image = "{prebuilt}"\n',
    )
    (notes / "environment" / "todo.txt").write_text("buy milk\n")
    return [*(load_task(EXAMPLES / name) for name in IMAGE_TASKS), load_task(notes)]


def test_oracle_gets_reward_1_on_each_task_image(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tasks: list[Task], tmp_path: Path
) -> None:
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path)
    with Runner(config, agent_backend) as runner:
        results = {r.task: r for r in runner.run_batch(tasks, concurrency=3)}
    for task in tasks:
        result = results[task.name]
        assert (result.status, result.reward, result.exit_code) == (Status.OK, 1.0, 0), result.error
        assert result.image.startswith(f"agentbake-run/{task.name}:") and result.task_image is not None
        assert "image" in result.timings
    assert results["prebuilt-notes"].task_image == PREBUILT
    assert results["summarize-logs"].task_image.startswith("agentbake-task/summarize-logs:")
    # The workdir diff comes from the bundle's git (none of these images has git).
    diff = (results["summarize-logs"].out_dir / "workdir.diff").read_text()
    assert "+++ b/summary.csv" in diff and "+api,4" in diff and "logs/" not in diff
    assert (
        '+    return [p["name"] for p in products if p["stock"] <= p["reorder_at"]]'
        in (results["fix-inventory"].out_dir / "workdir.diff").read_text()
    )
    assert "+reviewed" in (results["prebuilt-notes"].out_dir / "workdir.diff").read_text()


def test_claude_code_with_the_scripted_model_gets_reward_1_on_each_task_image(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tasks: list[Task], tmp_path: Path
) -> None:
    config = RunnerConfig(image=built_images["claude-code"].tag, model="scripted", out_dir=tmp_path)
    with Runner(config, agent_backend) as runner:
        runner.start_scripted(tasks)
        results = {r.task: r for r in runner.run_batch(tasks, concurrency=3)}
    for task in tasks:
        result = results[task.name]
        assert (result.status, result.reward, result.agent) == (Status.OK, 1.0, "claude-code"), result.error
        assert result.turns >= 2 and result.tokens > 0 and result.calls_without_token_ids == 0
        assert (result.out_dir / "agent" / "claude-code.log").is_file()


def test_task_image_sandbox_has_no_network_and_a_read_only_bundle(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, engine: docker.DockerClient, tasks: list[Task]
) -> None:
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True)
    with Runner(config, agent_backend) as runner:
        resolved = runner.images.resolve(tasks[0])
    sandbox = agent_backend.create(
        SandboxRequest(image=resolved.ref, rollout_id="isolation", agent_bundle=resolved.bundle)
    )
    try:
        host = engine.api.inspect_container(sandbox.sandbox_id)["HostConfig"]
        assert host["NetworkMode"] == "none" and host["Privileged"] is False
        checks = sandbox.exec(
            "id -un; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; stat -c %U /app;"
            f" touch {BUNDLE_MOUNT}/x 2>&1 | grep -c 'Read-only'; {BUNDLE_GIT} --version | cut -d' ' -f1-2;"
            " command -v python3 git || echo neither-on-path"
        )
        # No USER in the image: the agent is root, as Harbor runs it; /app stays root's, as the image made it.
        assert checks.stdout.split("\n")[:6] == ["root", "lo", "root", "1", "git version", "neither-on-path"]
        # The relay (the bundle's python, as root) is the container's main process; a non-root agent cannot
        # signal it (a root agent can: tests/runner/harness/test_root_agent.py).
        find_relay = "for p in /proc/[0-9]*; do grep -qs forwarder.py $p/cmdline && echo ${p#/proc/}; done | head -1"
        relay = sandbox.exec(
            f'pid=$({find_relay}); stat -c %u /proc/$pid; kill -0 "$pid" 2>/dev/null; echo $?', user="nobody"
        )
        assert relay.stdout.split() == ["0", "1"]
    finally:
        sandbox.kill()


def oracle_in_a_debian_image(
    task_dir: Path, built_images: dict[str, BuildResult], agent_backend: DockerBackend
) -> RolloutResult:
    """The task's oracle rollout in an image of its own (debian, WORKDIR /app) with claude-code layered on."""
    (task_dir / "environment").mkdir()
    (task_dir / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=task_dir.parent / "out")
    with Runner(config, agent_backend) as runner:
        result = runner.run(load_task(task_dir))
    assert result.task_image is not None
    return result


def test_agent_processes_are_dead_before_the_verifier_in_a_task_image(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    """The tamper payload (planted reward files, a detached rewriting process) gets no reward here either."""
    task_dir = write_task(tmp_path, "tamper-image", solve=TAMPER, test=UNSOLVED_VERIFIER)
    result = oracle_in_a_debian_image(task_dir, built_images, agent_backend)
    assert (result.status, result.reward, result.verifier_exit_code) == (Status.OK, 0.0, 0), result.error
    _, before, after = (result.out_dir / "verifier" / "stdout.txt").read_text().split()
    assert int(before) > 1 and before == after, "the agent's background process outlived the agent"
    assert (result.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "0\n"


def test_a_remote_backend_names_the_command_that_publishes_an_unpublished_environment(
    built_images: dict[str, BuildResult], tasks: list[Task], tmp_path: Path
) -> None:
    """The clouds start a task's published layered image, found by its environment hash: one not published
    is a sandbox error naming the command, before any sandbox."""
    manifest = tmp_path / "published.json"
    manifest.write_text('{"schema": "agentbake-published/1"}')
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path)
    with Runner(config, HFBackend(HFConfig(manifest=manifest))) as runner:
        result = runner.run(tasks[0])
    assert result.status == Status.SANDBOX_ERROR
    assert "is not in the published manifest" in result.error and "agentbake publish AGENT --path" in result.error


TERMINAL_BENCH_TOML = """version = "1.0"

[task]
name = "terminal-bench/tb-shaped"
description = "A task laid out as Terminal-Bench 2.0's are."
keywords = ["example"]
[[task.authors]]
name = "agentbake"

[metadata]
difficulty = "easy"
category = "file-operations"
tags = ["example"]
expert_time_estimate_min = 1.0

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/tb-shaped:20251031"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
allow_internet = true
mcp_servers = []

[verifier.env]

[environment.env]

[solution.env]
"""


def test_a_terminal_bench_shaped_task_runs_with_the_oracle(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    """Its task.toml as Terminal-Bench 2.0 writes them (a docker_image no registry here serves, and an
    environment/Dockerfile that runs setup.sh at build time, WORKDIR /app): the pull fails, the Dockerfile
    is built, and the oracle gets reward 1 in a sandbox with no network."""
    root = write_task(
        tmp_path,
        "tb-shaped",
        instruction="Write the number of lines of /app/input.txt into /app/count.txt.\n",
        solve="wc -l < /app/input.txt > /app/count.txt\n",
        test='[ "$PWD" != / ] || exit 1\n[ "$(cat /app/count.txt)" = 3 ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n",
        toml=TERMINAL_BENCH_TOML,
    )
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nCOPY setup.sh /app/\nRUN bash /app/setup.sh && rm /app/setup.sh\nWORKDIR /app\n"
    )
    (root / "environment" / "setup.sh").write_text("printf 'a\\nb\\nc\\n' > /app/input.txt\n")
    task = load_task(root)
    assert task.docker_image == "alexgshaw/tb-shaped:20251031" and task.dockerfile is not None
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
    with Runner(config, agent_backend) as runner:
        result = runner.run(task)
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error
    assert result.task_image.startswith("agentbake-task/tb-shaped:")  # built: the pull failed


def test_a_task_image_without_base64_is_a_sandbox_error_naming_it(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    """The agent's files ride to the sandbox in base64 (`harness/upload.py`): an image with no `base64` is told
    so, before any task code runs."""
    root = write_task(tmp_path, "no-base64", solve="touch solved\n", test=reward_if("[ -f /app/solved ]"))
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN rm /usr/bin/base64\nWORKDIR /app\n"
    )
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
    with Runner(config, agent_backend) as runner:
        result = runner.run(load_task(root))
    assert (result.status, result.reward) == (Status.SANDBOX_ERROR, 0.0)
    assert "the sandbox has no base64 command (coreutils)" in result.error and "install coreutils" in result.error
    assert not (result.out_dir / "agent" / "oracle.log").exists()  # nothing of the task ran


def test_cli_builds_a_new_task_image_with_progress_on_stderr_and_clean_json(
    built_images: dict[str, BuildResult], engine: docker.DockerClient, tmp_path: Path
) -> None:
    """`agentbake run --agent claude-code --task <a task image never built> --oracle --json`."""
    task = tmp_path / "summarize-logs-fresh"
    shutil.copytree(EXAMPLES / "summarize-logs", task)
    (task / "environment" / "nonce.txt").write_text(str(task))  # a new build context: a new task image
    done = agentbake("run", "--agent", "claude-code", "--path", str(task), "--oracle", "-o", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # stdout is the one result object, nothing else
    assert (result["status"], result["reward"]) == ("ok", 1.0)
    assert "building summarize-logs-fresh" in done.stderr and "step 1/" in done.stderr
    for ref in (result["image"], result["task_image"]):
        engine.images.remove(ref, force=True)


@pytest.mark.parametrize("agent", ["codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"])
def test_the_other_agents_run_in_a_task_image_without_python(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path, agent: str
) -> None:
    """Codex, OpenCode (native binaries), Gemini CLI, Pi and Qwen Code (Node programs, on the bundle's own node;
    Gemini CLI and Qwen Code re-spawn it by `process.execPath`) and mini-swe-agent (a Python program, on the bundle's
    python with its venv's packages) in summarize-logs' image."""
    task = load_task(EXAMPLES / "summarize-logs")
    config = RunnerConfig(image=built_images[agent].tag, model="scripted", out_dir=tmp_path)
    with Runner(config, agent_backend) as runner:
        runner.start_scripted([task])
        result = runner.run(task)
    assert (result.status, result.reward, result.agent) == (Status.OK, 1.0, agent), result.error
    assert result.turns >= 2 and result.calls_without_token_ids == 0


FIX_INVENTORY_ATTACKS = {
    "no-fix": "true\n",
    # Exits 0 when imported, before printing anything: the verifier must not count that as passing.
    "exits-0-at-import": "echo 'import os; os._exit(0)' >> /app/inventory.py\n",
    # Leaves a process that writes reward files after the verifier's run (the function stays wrong).
    "leaves-a-daemon": (
        "cat >> /app/inventory.py <<'PY'\n"
        "import subprocess\n"
        "subprocess.Popen(['setsid', 'sh', '-c', 'sleep 1; echo 1 > /logs/verifier/reward.txt; "
        'echo {\\"reward\\": 1} > /logs/verifier/reward.json\'])\n'
        "PY\n"
    ),
}


def test_the_agents_code_gets_no_reward_it_did_not_earn_in_fix_inventory(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    """The task image's verifier runs the agent's code as the agent's user and judges only what it printed."""
    tasks = []
    for name, solve in FIX_INVENTORY_ATTACKS.items():
        task = tmp_path / name
        shutil.copytree(EXAMPLES / "fix-inventory", task)
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
        tasks.append(load_task(task))
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
    with Runner(config, agent_backend) as runner:
        results = {r.task: r for r in runner.run_batch(tasks, concurrency=3)}
    for name in FIX_INVENTORY_ATTACKS:
        assert (results[name].status, results[name].reward) == (Status.OK, 0.0), (name, results[name].error)


def test_the_agents_links_into_tests_are_removed_in_a_task_image_too(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    """The verifier's symlink attacks (tests/runner/harness/test_verifier.py), planted in a task image's /app."""
    result = oracle_in_a_debian_image(symlink_task(tmp_path), built_images, agent_backend)
    assert (result.status, result.reward) == (Status.OK, 0.0), result.error
    assert "LEAK" not in (result.out_dir / "verifier" / "stdout.txt").read_text()
    listed = (result.out_dir / "verifier" / "removed-links.txt").read_text().splitlines()
    assert '"/app/answer.txt" -> "/tests/expected.txt"' in listed
    assert '"/root/stash/hop" -> "/tests"' in listed  # the agent is root here: its home is /root
