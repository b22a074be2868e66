"""`agentbake run/rollout --backend e2b|hf` end to end against the loopback fakes of E2B and the Hub.

The real `e2b` and `huggingface_hub` SDKs, the real harness, Claude Code in the claude-code image and the
scripted model; only the clouds are fakes (tests/runner/fakes/). Their sandboxes are local containers on
the host's network, the way a cloud sandbox reaches the trainer's gateway relay over the network: here on
127.0.0.1. The image each cloud starts comes from the published manifest, by the image's content hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner

from agentbake.buildkit.build import BuildResult
from agentbake.cli import main
from agentbake.publish.manifest import Published, save_manifest
from agentbake.runner.remote import ImageFacts
from tests.runner.fakes.containers import LocalMachines, remove_leftovers
from tests.runner.fakes.servers import fake_e2b, fake_hub
from tests.runner.rollouts import EXAMPLES

pytestmark = pytest.mark.docker


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
        args = ["run", "claude-code", "--task", str(EXAMPLES / "write-file"), "--backend", backend]
        args += ["--manifest", str(manifest), "--out", str(tmp_path), "--json"]
        done = CliRunner().invoke(main, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert (result["status"], result["reward"], result["exit_code"]) == ("ok", 1.0, 0), result["error"]
        assert result["turns"] >= 2 and result["tokens"] > 0 and result["calls_without_token_ids"] == 0
        out = Path(result["out_dir"])
        records = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
        assert len(records) == result["turns"] and {r["rollout_id"] for r in records} == {result["rollout_id"]}
        assert (out / "workdir.diff").read_text()
        assert (fake.created, fake.killed, fake.alive) == (1, 1, 0)
