"""`agentbake publish AGENT --path DIR` and the rollouts that start what it published, end to end.

Two Terminal-Bench-layout tasks with the same environment/ (their own Dockerfile, FROM the Debian base
`make bases` builds) are published once: one layered image (the task image with claude-code's bundle copied in)
pushed to the real test registry, one E2B template built through the real `e2b` SDK against the loopback
template fake, one Hugging Face reference. Then the oracle and claude-code with the scripted model run on
`--backend e2b` and `--backend hf` against the sandbox fakes (tests/runner/fakes/), whose sandboxes pull
that registry image: reward 1, trace captured.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.publish.manifest import Published, load_manifest
from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.tasks import load_task
from tests.publish.fake_e2b import FakeE2B, FakeE2BServer
from tests.publish.registry_service import RunningRegistry
from tests.runner.cli.test_remote_cli import remote_cli
from tests.runner.fakes.containers import LocalMachines, remove_leftovers
from tests.runner.fakes.servers import fake_e2b, fake_hub

pytestmark = pytest.mark.docker

TOML = """version = "1.0"

[metadata]
difficulty = "easy"
category = "file-operations"

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 2048
"""
DOCKERFILE = """FROM debian:bookworm-slim
COPY wget /usr/local/bin/wget
RUN printf 'a\\nb\\nc\\n' > /srv/input.txt
WORKDIR /app
"""
# A Hugging Face sandbox's bootstrap fetches a helper with curl or wget, which the slim base lacks; the fakes never
# run it, so a stand-in on PATH satisfies the publish check.
WGET = "#!/bin/sh\necho 'wget stand-in' >&2\nexit 1\n"


def tb_task(root: Path, name: str) -> Path:
    task = root / name
    for folder in ("environment", "solution", "tests"):
        (task / folder).mkdir(parents=True)
    (task / "instruction.md").write_text("Write the number of lines of /srv/input.txt into /app/count.txt.\n")
    (task / "task.toml").write_text(TOML)
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (task / "environment" / "wget").write_text(WGET)
    (task / "environment" / "wget").chmod(0o755)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nwc -l < /srv/input.txt > /app/count.txt\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat /app/count.txt)" = 3 ] && echo 1 > /logs/verifier/reward.txt || '
        "echo 0 > /logs/verifier/reward.txt\n"
    )
    return task


@pytest.fixture(scope="module")
def machines(engine: docker.DockerClient) -> Iterator[LocalMachines]:
    local = LocalMachines(network_mode="host")  # the sandboxes reach the rollout's relay on loopback
    yield local
    local.remove_all()
    assert remove_leftovers(local) == 0


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tb-tasks")
    tb_task(root, "count-lines")
    tb_task(root, "count-lines-again")  # the same environment: shares the published image and template
    return root


@pytest.fixture(scope="module")
def published(
    registry: RunningRegistry, built_images, tasks_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Published, list[dict]]]:
    """Publish the tasks' environment with claude-code to the registry, E2B (fake) and HF; then once more."""
    prefix = registry.repository(f"env-{uuid.uuid4().hex[:8]}")
    manifest = tmp_path_factory.mktemp("manifest") / "published.json"
    args = ["publish", "claude-code", "--path", str(tasks_dir), "--registry", prefix, "--e2b", "--hf"]
    args += ["--manifest", str(manifest), "--json"]
    with pytest.MonkeyPatch.context() as patch, FakeE2BServer() as e2b_fake:
        patch.setenv("E2B_API_URL", e2b_fake.url)
        patch.setenv("E2B_API_KEY", "e2b_test_key")
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 0, first.output
        again = CliRunner().invoke(main, args)
        assert again.exit_code == 0, again.output
        check_template_build(e2b_fake, built_images)
    lines = [[json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")] for run in (first, again)]
    yield manifest, load_manifest(manifest), lines


def check_template_build(fake: FakeE2B, built_images) -> None:
    [create] = fake.bodies("POST", "/v3/templates")  # one template for both tasks, built once
    assert create["name"].startswith("agentbake-env-")
    [trigger] = fake.bodies("POST", "/v2/templates/")
    assert "/agentbake-env:" in trigger["fromImage"]
    assert ("USER", ["root"]) in [(step["type"], step["args"]) for step in trigger["steps"]]


def test_one_environment_is_published_once_then_skipped(published, built_images) -> None:
    path, manifest, (first, again) = published
    assert {(r["target"], r["action"]) for r in first} == {("registry", "pushed"), ("hf", "checked"), ("e2b", "pushed")}
    assert len(first) == 3  # the agent image itself is not published: every task has an image of its own
    assert {(r["target"], r["action"]) for r in again} == {
        ("registry", "skipped"),
        ("hf", "checked"),
        ("e2b", "skipped"),
    }
    [(environment, record)] = manifest.environments.items()
    listed = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["published", "--manifest", str(path)])
    assert listed.exit_code == 0 and "environment (count-lines, count-lines-again)" in listed.output
    assert record.tasks == ["count-lines", "count-lines-again"]
    assert record.agent == built_images["claude-code"].tag
    assert record.e2b_template == f"agentbake-env-{environment[:12]}:{environment[:12]}"
    [ref] = record.registry.values()
    assert record.hf_image == ref.reference and ref.reference.endswith(f"/agentbake-env:{environment[:12]}")


@pytest.mark.parametrize("backend", ["e2b", "hf"])
def test_the_oracle_and_claude_code_get_reward_1_on_the_published_environment(
    backend: str,
    published,
    built_images,
    tasks_dir: Path,
    machines: LocalMachines,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The oracle through the Runner API on one task; claude-code with the scripted model through `agentbake
    rollout --backend` on both tasks, which share the environment."""
    path, manifest, _ = published
    [record] = manifest.environments.values()
    [registry_ref] = record.registry.values()
    agent = built_images["claude-code"].tag
    if backend == "e2b":
        # The sandbox fake starts the template from the image its build pulled: the registry's.
        assert record.e2b_template is not None
        served = fake_e2b(monkeypatch, machines, {record.e2b_template: (registry_ref.reference, "root")})
        make = lambda: E2BBackend(E2BConfig(manifest=path))  # noqa: E731
    else:
        served = fake_hub(monkeypatch, machines)
        make = lambda: HFBackend(HFConfig(manifest=path))  # noqa: E731 (made once the fake's endpoint is set)
    with served as fake:
        remote = make()
        with Runner(RunnerConfig(image=agent, oracle=True, out_dir=tmp_path / "oracle"), remote) as runner:
            oracle = runner.run(load_task(tasks_dir / "count-lines"))
        assert (oracle.status, oracle.reward) == (Status.OK, 1.0), oracle.error
        assert oracle.task_image is not None and oracle.task_image.startswith("agentbake-task/count-lines:")
        remote.close()
        rollout = ("rollout", "claude-code", "--path", tasks_dir, "--upstream", "scripted", "-n", "2")
        lines = remote_cli(*rollout, backend=backend, manifest=path, out=tmp_path / "scripted")
    results = [line for line in lines if "rollout_id" in line]
    assert sorted(r["task"] for r in results) == ["count-lines", "count-lines-again"]
    for result in results:
        assert (result["status"], result["reward"], result["agent"]) == ("ok", 1.0, "claude-code"), result["error"]
        assert result["turns"] >= 2 and result["tokens"] > 0
        trace = (Path(result["out_dir"]) / "trace.jsonl").read_text().splitlines()
        assert len(trace) == result["turns"] and all(
            json.loads(line)["rollout_id"] == result["rollout_id"] for line in trace
        )
    assert (fake.created, fake.alive) == (3, 0)
    if backend == "hf":
        assert {job.spec["dockerImage"] for job in fake.jobs.values()} == {registry_ref.reference}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["claude-code", "--e2b-from-dockerfile"], "use --e2b with --registry REPO instead of --e2b-from-dockerfile"),
        (["claude-code", "--hf", "--hf-space", "org/x"], "--hf-space holds one catalog image"),
        (["claude-code", "--hf"], "--hf needs a reference a sandbox can pull: pass --registry REPO"),
        (["--registry", "127.0.0.1:5000/x"], "name the agent image"),
    ],
)
def test_bad_task_options_are_refused_naming_the_fix(tmp_path: Path, extra: list[str], message: str) -> None:
    tb_task(tmp_path, "count-lines")
    done = CliRunner().invoke(main, ["publish", "--path", str(tmp_path), *extra])
    assert done.exit_code != 0 and message in done.output, done.output


def test_a_dry_run_publishes_the_agent_image_only_for_tasks_that_run_in_it(built_images, tmp_path: Path) -> None:
    tb_task(tmp_path, "own-image")
    task = tb_task(tmp_path, "no-image")
    for path in sorted((task / "environment").iterdir()):
        path.unlink()
    (task / "environment").rmdir()
    args = ["publish", "claude-code", "--path", str(tmp_path), "--registry", "127.0.0.1:9/x", "--dry-run", "--json"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(r["image"], r["target"]) for r in lines] == [("claude-code", "registry"), ("own-image", "environment")]


def test_a_task_whose_image_cannot_be_built_fails_naming_it(built_images, tmp_path: Path) -> None:
    task = tb_task(tmp_path, "broken-image")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN exit 7\n")
    args = ["publish", "claude-code", "--path", str(task), "--registry", "127.0.0.1:9/x", "--json"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 1
    [failed] = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert (failed["image"], failed["target"], failed["action"]) == ("broken-image", "task", "failed")
    assert failed["error"].startswith("task broken-image: ") and "RUN exit 7" in failed["error"]
