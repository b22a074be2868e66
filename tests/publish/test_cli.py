"""`agentbake publish / published / ci-matrix` end to end: a catalog image into the real test registry."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.publish.manifest import load_manifest
from agentbake.publish.registry import Distribution, Repository
from tests.publish.fake_e2b import FakeE2BServer
from tests.publish.fake_hub import FakeHubServer
from tests.publish.registry_service import RunningRegistry


def _json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


@pytest.mark.docker
def test_publish_pushes_then_skips_and_records_the_manifest(
    registry: RunningRegistry, built_images, tmp_path: Path
) -> None:
    prefix = registry.repository(f"cli-{uuid.uuid4().hex[:8]}")
    manifest = tmp_path / "published.json"
    runner = CliRunner()
    args = ["publish", "opencode", "--registry", prefix, "--manifest", str(manifest), "--json"]

    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    [pushed] = _json_lines(first.stdout)
    tag = built_images["opencode"].tag.split(":")[1]
    assert pushed["action"] == "pushed" and pushed["image"] == "opencode" and pushed["tag"] == tag
    assert pushed["reference"] == f"{prefix}/opencode:{tag}"
    remote = Distribution(Repository.parse(f"{prefix}/opencode"), None)
    assert remote.manifest(tag).digest == pushed["digest"] == remote.manifest("latest").digest
    assert remote.manifest(tag).config_digest == built_images["opencode"].id

    second = runner.invoke(main, args)
    assert second.exit_code == 0, second.output
    [skipped] = _json_lines(second.stdout)
    assert (skipped["action"], skipped["digest"]) == ("skipped", pushed["digest"])

    text = manifest.read_text()
    record = load_manifest(manifest).resolve("opencode")
    assert record.registry[f"{prefix}/opencode"].digest == pushed["digest"]
    assert "seconds" not in text and text == load_manifest(manifest).dumps()  # deterministic, no timings

    shown = runner.invoke(main, ["published", "--manifest", str(manifest), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout) == json.loads(text)

    # Every target at once: the registry copy is skipped, E2B builds from it, HF checks and gets a Space.
    with FakeE2BServer() as e2b, FakeHubServer() as hub:
        env = {"E2B_API_URL": e2b.url, "E2B_API_KEY": "k", "HF_ENDPOINT": hub.url, "HF_TOKEN": "t"}
        every = runner.invoke(main, [*args, "--e2b", "--hf", "--hf-space", "my-org/opencode"], env=env)
    assert every.exit_code == 0, every.output
    actions = {line["target"]: line["action"] for line in _json_lines(every.stdout)}
    assert actions == {"registry": "skipped", "hf-space": "pushed", "hf": "checked", "e2b": "pushed"}
    assert e2b.bodies("POST", "/v2/templates/")[0]["fromImage"] == f"{prefix}/opencode:{tag}"
    assert "Dockerfile" in hub.files["my-org/opencode"]
    record = load_manifest(manifest).resolve("opencode")
    assert (record.e2b_template, record.hf_image, record.hf_space) == (
        f"opencode:{tag}",
        f"{prefix}/opencode:{tag}",
        "my-org/opencode",
    )


@pytest.mark.docker
def test_dry_run_touches_nothing(registry: RunningRegistry, built_images, tmp_path: Path) -> None:
    prefix = registry.repository(f"dry-{uuid.uuid4().hex[:8]}")
    manifest = tmp_path / "published.json"
    result = CliRunner().invoke(
        main, ["publish", "pi", "--registry", prefix, "--e2b", "--manifest", str(manifest), "--json", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    lines = _json_lines(result.stdout)
    assert [(line["target"], line["action"]) for line in lines] == [("registry", "dry-run"), ("e2b", "dry-run")]
    assert not manifest.exists()
    assert Distribution(Repository.parse(f"{prefix}/pi"), None).manifest(lines[0]["tag"]) is None


@pytest.mark.docker
def test_a_registry_that_is_down_fails_the_command_with_the_reason(built_images, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "publish",
            "opencode",
            "--registry",
            "127.0.0.1:9/agentbake",
            "--retries",
            "0",
            "--manifest",
            str(tmp_path / "m.json"),
            "--json",
        ],
    )
    assert result.exit_code == 1
    [failed] = _json_lines(result.stdout)
    assert failed["action"] == "failed" and "127.0.0.1:9 does not answer" in failed["error"]
    assert "127.0.0.1:9 does not answer" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["opencode"], "nothing to publish to"),
        (["opencode", "--e2b"], "--e2b builds from the pushed image"),
        (["opencode", "--hf"], "--hf needs a reference"),
        (["opencode", "--registry", "ghcr.io/x/"], "expected a repository prefix"),
    ],
)
def test_usage_errors_say_what_to_pass(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["publish", *args])
    assert result.exit_code != 0 and message in result.stderr


def test_published_without_a_manifest_says_how_to_make_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["published", "--manifest", str(tmp_path / "none.json")])
    assert result.exit_code == 1 and "agentbake publish" in result.stderr


def test_a_broken_manifest_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "published.json"
    path.write_text(json.dumps({"schema": "agentbake-published/1", "images": {"pi": {"abc": {"tag": 3}}}}))
    result = CliRunner().invoke(main, ["published", "--manifest", str(path)])
    assert result.exit_code == 1 and str(path) in result.stderr and "images.pi.abc.tag" in result.stderr


def test_ci_matrix_is_the_catalog(catalog) -> None:
    result = CliRunner().invoke(main, ["ci-matrix", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"image": catalog.names()}
