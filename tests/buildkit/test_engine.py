"""Engine problems reach the user as a message with the fix, not a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import docker
import pytest
from click.testing import CliRunner

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.engine import connect, ensure_base
from agentbake.cli import main
from agentbake.errors import EngineError

NO_ENGINE = "unix:///nonexistent/docker.sock"
TEMPLATE_MACHINERY = ("jinja2", "agentbake.buildkit.render", "agentbake.buildkit.spec", "agentbake.buildkit.build")


def test_the_engine_connection_and_the_runner_load_no_templates() -> None:
    """The runner connects through `agentbake.buildkit.engine`; the build kit's names load on first use."""
    probe = (
        "import json, sys\nimport agentbake.runner.runner\n"
        f"print(json.dumps(sorted(m for m in {TEMPLATE_MACHINERY!r} if m in sys.modules)))\n"
        "from agentbake.buildkit import Catalog, connect, render\n"
        "print(json.dumps([Catalog.__module__, connect.__module__, render.__module__]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    loaded, homes = (json.loads(line) for line in out.splitlines()[-2:])
    assert loaded == []
    assert homes == ["agentbake.buildkit.catalog", "agentbake.buildkit.engine", "agentbake.buildkit.render"]


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
