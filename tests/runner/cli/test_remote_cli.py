"""`agentbake run/rollout --backend e2b|hf` end to end against the loopback fakes of E2B and the Hub.

The real `e2b` and `huggingface_hub` SDKs, the real harness, Claude Code in the claude-code image and the
scripted model; only the clouds are fakes (tests/runner/fakes/). Their sandboxes are local containers on
the host's network, the way a cloud sandbox reaches the trainer's gateway relay over the network: here on
127.0.0.1. The image each cloud starts comes from the published manifest, by the image's content hash.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from click.testing import CliRunner

from agentbake.buildkit.build import BuildResult
from agentbake.cli import main
from agentbake.publish.manifest import Published, save_manifest
from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.remote.image_facts import ImageFacts
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread
from agentbake.tasks import load_task
from tests.runner.fakes.containers import LocalMachines, remove_leftovers
from tests.runner.fakes.servers import fake_e2b, fake_hub
from tests.runner.rollouts import CATALOG_IMAGE_EXAMPLES, EXAMPLES, reward_if, write_task
from tests.runner.test_rollout import KEY_PREFIX, PROBE

pytestmark = pytest.mark.docker


def remote_cli(*args: str | Path, backend: str, manifest: Path, out: Path, exit_code: int = 0) -> list[dict[str, Any]]:
    """`agentbake <args> --backend <backend> --manifest <manifest> -o <out> --json` in this process: its exit
    code checked (the output shown when it differs), then each line it printed, parsed."""
    options = ["--backend", backend, "--manifest", str(manifest), "-o", str(out), "--json"]
    done = CliRunner().invoke(main, [*map(str, args), *options], catch_exceptions=False)
    assert done.exit_code == exit_code, done.output
    return [json.loads(line) for line in done.stdout.strip().splitlines()]


@pytest.fixture(scope="module")
def machines(engine: docker.DockerClient) -> Iterator[LocalMachines]:
    local = LocalMachines(network_mode="host")
    yield local
    local.remove_all()
    assert remove_leftovers(local) == 0


@pytest.fixture(scope="module")
def published(engine: docker.DockerClient, built_images: dict[str, BuildResult], tmp_path_factory) -> tuple[Path, str]:
    """A manifest as `agentbake publish` writes it: the claude-code image's content hash -> its remote names."""
    tag = built_images["claude-code"].tag
    facts = ImageFacts.from_labels(tag, engine.images.get(tag).labels)
    manifest = Published()
    record = manifest.record("claude-code", facts.content_hash, tag)
    record.e2b_template = f"claude-code:{tag.rsplit(':', 1)[1]}"
    record.hf_image = tag  # the fake Hub runs local images by reference
    path = tmp_path_factory.mktemp("published") / "published.json"
    save_manifest(path, manifest)
    return path, record.e2b_template


@pytest.mark.parametrize("backend", ["e2b", "hf"])
def test_run_on_a_remote_backend_solves_the_task_and_leaves_nothing(
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
    machines: LocalMachines,
    built_images: dict[str, BuildResult],
    published: tuple[Path, str],
    tmp_path: Path,
) -> None:
    manifest, template = published
    tag = built_images["claude-code"].tag
    fake_cloud = fake_e2b(monkeypatch, machines, {template: (tag, "agent")}) if backend == "e2b" else None
    with fake_cloud or fake_hub(monkeypatch, machines) as fake:
        run = ("run", "claude-code", "--path", EXAMPLES / "write-file", "--upstream", "scripted")
        result = remote_cli(*run, backend=backend, manifest=manifest, out=tmp_path)[-1]
        assert (result["status"], result["reward"], result["exit_code"]) == ("ok", 1.0, 0), result["error"]
        assert result["turns"] >= 2 and result["tokens"] > 0 and result["calls_without_token_ids"] == 0
        out = Path(result["out_dir"])
        records = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
        assert len(records) == result["turns"] and {r["rollout_id"] for r in records} == {result["rollout_id"]}
        assert (out / "workdir.diff").read_text()
        assert (fake.created, fake.killed, fake.alive) == (1, 1, 0)


@pytest.mark.parametrize("backend", ["e2b", "hf"])
def test_gateway_in_the_sandbox_calls_upstream_with_a_key_the_agent_cannot_see(
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
    machines: LocalMachines,
    built_images: dict[str, BuildResult],
    published: tuple[Path, str],
    tmp_path: Path,
) -> None:
    """`--gateway sandbox`: the agent's own probe of every environment, command line and file it can read
    finds no key, the upstream receives it, and the trace of the in-sandbox gateway reaches out/."""
    key = KEY_PREFIX + secrets.token_hex(16)
    monkeypatch.setenv("AGENTBAKE_TEST_PROBE_KEY", key)
    task = load_task(write_task(tmp_path, "key-probe", solve=PROBE, test=reward_if("grep -q probed probe.txt")))
    model = ScriptedModel(tasks=[task])
    tag, (_, template) = built_images["claude-code"].tag, published
    config = RunnerConfig(
        image=tag, model="http://127.0.0.1:9/v1", api_key_env="AGENTBAKE_TEST_PROBE_KEY", out_dir=tmp_path / "out"
    )
    with serve_in_thread(model) as upstream:
        # No preflight from here with the gateway in the sandbox: the mode it is told is what records carry.
        update = {"model": f"{upstream.url}/v1", "gateway": "sandbox", "logprobs_mode": "raw"}
        config = config.model_copy(update=update)
        if backend == "e2b":
            cloud, sandboxes = (
                fake_e2b(monkeypatch, machines, {template: (tag, "agent")}),
                E2BBackend(E2BConfig(template=template)),
            )
        else:
            cloud, sandboxes = fake_hub(monkeypatch, machines), None
        with cloud as fake:
            sandboxes = sandboxes or HFBackend(HFConfig(image=tag))
            with Runner(config, sandboxes) as runner:
                result = runner.run(task)
            sandboxes.close()
            assert (fake.created, fake.alive) == (1, 0)
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error
    assert model.headers and all(h.get("authorization") == f"Bearer {key}" for h in model.headers)
    assert result.turns == len(model.requests) and result.tokens > 0  # every call's record was fetched
    assert {record.logprobs_mode for record in result.trace} == {"raw"}
    found = [line[1:] for line in (result.out_dir / "workdir.diff").read_text().splitlines() if line.startswith("+")]
    assert "probed" in found and KEY_PREFIX in found, "the probe did not run or saw no process"
    assert not any(key in line for line in found), "the upstream key is readable by the agent"


def test_a_batch_spans_sandboxes_concurrently_with_bounded_create_retries(
    monkeypatch: pytest.MonkeyPatch,
    machines: LocalMachines,
    built_images: dict[str, BuildResult],
    published: tuple[Path, str],
    tmp_path: Path,
) -> None:
    manifest, template = published
    with fake_e2b(monkeypatch, machines, {template: (built_images["claude-code"].tag, "agent")}) as fake:
        fake.fail_creates = [503, 429]  # two creates are refused once each, then go through
        examples = [arg for name in CATALOG_IMAGE_EXAMPLES for arg in ("--path", EXAMPLES / name)]
        rollout = ("rollout", "claude-code", *examples, "-k", "2", "-n", "6", "--oracle")
        lines = remote_cli(*rollout, backend="e2b", manifest=manifest, out=tmp_path)
        results = [line for line in lines if "rollout_id" in line]
        assert len(results) == 6 and {(r["status"], r["reward"]) for r in results} == {("ok", 1.0)}
        assert (fake.created, fake.killed, fake.alive, len(fake.create_bodies)) == (6, 6, 0, 8)


def test_an_image_not_published_at_its_hash_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
    machines: LocalMachines,
    built_images: dict[str, BuildResult],
    tmp_path: Path,
) -> None:
    tag = built_images["claude-code"].tag
    manifest = Published()
    manifest.record("claude-code", "0" * 64, "agentbake/claude-code:000000000000").e2b_template = "claude-code:x1"
    path = tmp_path / "published.json"
    save_manifest(path, manifest)
    with fake_e2b(monkeypatch, machines, {"claude-code:x1": (tag, "agent")}) as fake:
        run = ("run", "claude-code", "--path", EXAMPLES / "write-file", "--oracle")
        error = remote_cli(*run, backend="e2b", manifest=path, out=tmp_path / "out", exit_code=1)[-1]["error"]
        assert "no single published content hash matches" in error and "000000000000" in error
        assert fake.created == 0  # the template of another build is never started


@pytest.mark.parametrize("when", ["at create", "early in the harness", "at test.sh"])
@pytest.mark.parametrize("backend", ["e2b", "hf"])
def test_a_sandbox_that_stops_answering_is_a_sandbox_error_and_is_killed(
    backend: str,
    when: str,
    monkeypatch: pytest.MonkeyPatch,
    machines: LocalMachines,
    built_images: dict[str, BuildResult],
    published: tuple[Path, str],
    tmp_path: Path,
) -> None:
    tag, (_, template) = built_images["claude-code"].tag, published
    task = load_task(EXAMPLES / "multi-step-report")

    def rollout(fail_after: int | None) -> tuple[RolloutResult, list[str]]:
        """One oracle rollout whose sandbox stops answering after `fail_after` commands; the result and the
        commands the cloud saw."""
        if backend == "e2b":
            cloud = fake_e2b(monkeypatch, machines, {template: (tag, "agent")})
            make = lambda: E2BBackend(E2BConfig(template=template))  # noqa: E731
        else:
            cloud = fake_hub(monkeypatch, machines)
            make = lambda: HFBackend(HFConfig(image=tag))  # noqa: E731
        with cloud as fake:
            if backend == "e2b":
                fake.fail_starts_after = fail_after
            else:
                fake.fail_execs_after = fail_after
            sandboxes = make()
            with Runner(RunnerConfig(image=tag, oracle=True, out_dir=tmp_path / str(fail_after)), sandboxes) as runner:
                result = runner.run(task)
            sandboxes.close()
            seen = [" ".join(s.cmd) for s in fake.starts] if backend == "e2b" else [json.dumps(e) for e in fake.execs]
            assert (fake.created, fake.alive) == (1, 0)
        return result, seen

    after = {"at create": 0, "early in the harness": 3}.get(when)
    if after is None:  # the harness's command count changes as it is tuned: find the verifier's by its script
        healthy, commands = rollout(None)
        assert healthy.status is Status.OK, healthy.error
        after = next(i for i, command in enumerate(commands) if "/tests/test.sh" in command)
    result, _ = rollout(after)
    assert result.status is Status.SANDBOX_ERROR, result.error
    assert "stopped answering" in (result.error or "")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--gateway", "sandbox"], 1, "--gateway sandbox is for remote backends"),
        (["--backend", "e2b", "--relay-listen", "8900"], 2, "expected HOST:PORT"),
    ],
)
def test_bad_backend_options_are_one_clear_error(
    built_images: dict[str, BuildResult], tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    task = ["--path", str(EXAMPLES / "write-file"), "--oracle", "-o", str(tmp_path)]
    done = CliRunner().invoke(main, ["run", "claude-code", *task, *args])
    assert (done.exit_code, message in done.output) == (code, True), done.output
