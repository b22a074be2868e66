"""The CLI as a user meets it: JSON reports, usage errors and the messages of failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbake.buildkit.catalog import Catalog
from agentbake.cli import main
from tests.conftest import write_spec


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_render_writes_dockerfile_and_context(tmp_path: Path) -> None:
    result = invoke("render", "pi", "-o", str(tmp_path / "out"), "--no-ca-cert")
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written == [
        "Dockerfile",
        "agent/package-lock.json",
        "agent/package.json",
        "dpkg-slim.cfg",
        "requirements.txt",
    ]


def test_render_includes_the_ca_cert(tmp_path: Path) -> None:
    ca = tmp_path / "corp.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    result = invoke("render", "opencode", "-o", str(tmp_path / "out"), "--ca-cert", str(ca))
    assert result.exit_code == 0 and (tmp_path / "out/ca/extra-ca.crt").read_bytes() == ca.read_bytes()
    assert invoke("render", "opencode", "--ca-cert", str(ca), "--no-ca-cert").exit_code == 2


def test_render_prints_the_dockerfile() -> None:
    result = invoke("render", "claude-code")
    assert result.exit_code == 0 and result.output.startswith("# Rendered by agentbake")


def test_unknown_image_is_a_clear_error() -> None:
    result = invoke("render", "claude")
    assert result.exit_code == 1
    assert (
        "error: catalog: no image named 'claude'; known images: "
        "claude-code, codex, gemini-cli, mini-swe-agent, opencode, pi, qwen-code" in result.output
    )


def test_build_needs_names_or_all() -> None:
    result = invoke("build")
    assert result.exit_code == 2 and "name one or more images, or pass --all" in result.output


def test_spec_error_reaches_the_user(user_catalog: Path) -> None:
    write_spec(user_catalog, "bad", "description = 1\n")
    result = invoke("render", "bad", "--catalog", str(user_catalog))
    assert (
        result.exit_code == 1 and "bad/image.toml" in result.output and "missing required key 'base'" in result.output
    )


def test_stale_lock_reaches_the_user(user_catalog: Path, catalog: Catalog) -> None:
    original = catalog.load("opencode")
    text = (original.source_dir / "image.toml").read_text().replace('"1.18.33"', '"1.18.30"')
    write_spec(user_catalog, "opencode", text, lock_from=original.lock_path)
    result = invoke("build", "opencode", "--catalog", str(user_catalog))
    assert result.exit_code == 1 and "stale lock" in result.output and "agentbake lock opencode" in result.output


@pytest.mark.docker
def test_build_json_reports_cached_images(built_images) -> None:
    result = invoke("build", "--all", "--json")
    assert result.exit_code == 0, result.output
    reports = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["image"] for r in reports] == [
        "claude-code",
        "codex",
        "gemini-cli",
        "mini-swe-agent",
        "opencode",
        "pi",
        "qwen-code",
    ]
    for report in reports:
        assert set(report) == {"image", "tag", "id", "size_bytes", "cached", "seconds"}
        assert report["cached"] is True and report["tag"] == built_images[report["image"]].tag
        assert report["size_bytes"] > 100_000_000


@pytest.mark.docker
def test_images_lists_the_catalog(built_images) -> None:
    result = invoke("images", "--json")
    rows = {row["image"]: row for row in map(json.loads, result.stdout.splitlines())}
    assert rows["pi"]["agent"] == "Pi" and rows["pi"]["locked_version"] == "0.73.1"
    assert all(row["built"] is True and row["tag"] == built_images[name].tag for name, row in rows.items())


@pytest.mark.docker
def test_build_failure_prints_step_and_last_output(built_images, user_catalog: Path, catalog: Catalog) -> None:
    write_spec(
        user_catalog,
        "broken",
        'extends = "opencode"\nrun = ["echo last-words >&2; false"]\n',
        lock_from=catalog.load("opencode").lock_path,
    )
    result = invoke("build", "broken", "--catalog", str(user_catalog))
    assert result.exit_code == 1
    assert "last output of step" in result.output and "last-words" in result.output
    assert "error: building agentbake/broken:" in result.output


@pytest.mark.docker
def test_doctor_reports_engine_and_bases(built_images) -> None:
    result = invoke("doctor", "--json")
    checks = {c["name"]: c for c in map(json.loads, result.stdout.splitlines())}
    assert checks["engine"]["ok"] and "Docker engine" in checks["engine"]["detail"]
    assert checks["base debian:trixie-slim"]["ok"] and checks["base debian:bookworm-slim"]["ok"]
