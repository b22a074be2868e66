"""Engine problems reach the user as a message with the fix, not a traceback."""

from __future__ import annotations

import json

import docker
import pytest
from click.testing import CliRunner

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.engine import connect, ensure_base
from agentbake.cli import main
from agentbake.errors import EngineError

NO_ENGINE = "unix:///nonexistent/docker.sock"


def test_no_engine_says_how_to_start_one(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    with pytest.raises(EngineError, match=r"no Docker engine answers .*start one .*agentbake doctor"):
        connect(timeout=5)


def test_build_without_engine_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    result = CliRunner().invoke(main, ["build", "claude-code"])
    assert result.exit_code == 1 and "error: no Docker engine answers" in result.output


def test_doctor_without_engine_prints_the_fix(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    result = CliRunner().invoke(main, ["doctor", "--json"])
    checks = {c["name"]: c for c in map(json.loads, result.stdout.splitlines())}
    assert result.exit_code == 1 and not checks["engine"]["ok"]
    assert "apt-get install docker.io" in checks["engine"]["fix"]


@pytest.mark.docker
def test_missing_base_names_the_offline_fix(engine: docker.DockerClient, catalog: Catalog) -> None:
    with pytest.raises(EngineError) as info:
        ensure_base(engine, "agentbake-test/no-such-base:1", "trixie")
    message = str(info.value)
    assert "'agentbake-test/no-such-base:1' is not on this engine and could not be pulled" in message
    assert "agentbake base debian --suite trixie --tag agentbake-test/no-such-base:1" in message
