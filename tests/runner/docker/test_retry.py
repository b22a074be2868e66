"""`create` retries transient engine errors, gives up on the others, and leaves nothing either way."""

from __future__ import annotations

import secrets
from pathlib import Path

import docker
import pytest

from agentbake.errors import SandboxError
from agentbake.runner.docker import labels
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.sandbox import SandboxRequest
from tests.runner.faulty_engine import FaultyEngine

# The engine has made the container by then: a failed try must remove it.
START = r"^POST /v[\d.]+/containers/[^/]+/start$"

RUN = secrets.token_hex(3)  # rollout ids unique per session: other sessions share the engine


def faulty(tmp_path: Path, engine_socket: str, failures: int, status: int = 500) -> FaultyEngine:
    return FaultyEngine(tmp_path / "engine.sock", engine_socket, START, failures, status)


def labelled(engine: docker.DockerClient, rollout_id: str) -> list[str]:
    return [c.id for c in engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}={rollout_id}"})]


@pytest.fixture
def config(tmp_path: Path) -> DockerConfig:
    return DockerConfig(runtime_dir=tmp_path / "sandboxes", create_attempts=3, retry_backoff_s=0.01, memory_mb=256)


def test_transient_failures_are_retried_and_the_failed_tries_removed(
    tmp_path: Path, engine_socket: str, image: str, config: DockerConfig, engine: docker.DockerClient
) -> None:
    with faulty(tmp_path, engine_socket, failures=2) as proxy:
        backend = DockerBackend(config, base_url=proxy.url)
        try:
            sandbox = backend.create(SandboxRequest(image=image, rollout_id=f"test-retry-ok-{RUN}"))
            assert proxy.matched == 3
            assert labelled(engine, f"test-retry-ok-{RUN}") == [sandbox.sandbox_id]
            assert sandbox.exec("echo ok").stdout == "ok\n"
            assert sorted(p.name for p in config.runtime_dir.iterdir()) == [sandbox.name]
        finally:
            backend.close()
    assert labelled(engine, f"test-retry-ok-{RUN}") == []


@pytest.mark.parametrize(("failures", "status", "tries"), [(5, 500, 3), (1, 409, 1)])
def test_giving_up_leaves_nothing_behind(
    tmp_path: Path,
    engine_socket: str,
    image: str,
    config: DockerConfig,
    engine: docker.DockerClient,
    failures: int,
    status: int,
    tries: int,
) -> None:
    with faulty(tmp_path, engine_socket, failures, status) as proxy:
        backend = DockerBackend(config, base_url=proxy.url)
        with pytest.raises(SandboxError, match="injected by the test") as raised:
            backend.create(SandboxRequest(image=image, rollout_id=f"test-retry-fail-{RUN}"))
        backend.close()
    assert proxy.matched == tries  # 5xx: every try; 409: not transient, no second try
    assert ("after 3 tries" in str(raised.value)) == (tries == 3)
    assert labelled(engine, f"test-retry-fail-{RUN}") == []
    assert list(config.runtime_dir.iterdir()) == []
