"""The Docker backend's engine clients: the engine's API version is asked once per process and engine address,
whoever makes the client (the CLI's `connect`, the backend's `DockerEngine`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbake.buildkit.engine import api_client, connect, find_image
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.docker.engine import DockerEngine
from tests.runner.faulty_engine import FaultyEngine

pytestmark = pytest.mark.docker

VERSION = r"^GET (/v[\d.]+)?/version"


def test_the_api_version_is_asked_once_per_engine(
    engine_socket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultyEngine(tmp_path / "engine.sock", engine_socket, VERSION, failures=0) as relay:
        monkeypatch.setenv("DOCKER_HOST", relay.url)  # an address this process has not talked to yet
        client = connect(timeout=30)
        assert relay.matched == 1
        assert connect(timeout=30).api.api_version == client.api.api_version  # a ping, no second version request
        backend_engine = DockerEngine(DockerConfig(runtime_dir=tmp_path / "sandboxes"), base_url=relay.url)
        assert backend_engine.api.api_version == backend_engine.stream_api.api_version == client.api.api_version
        assert api_client().api_version == client.api.api_version
        assert relay.matched == 1
        assert find_image(client, "agentbake-test/absent:1") is None  # the clients work through the relay
    with FaultyEngine(tmp_path / "other.sock", engine_socket, VERSION, failures=0) as other:
        DockerEngine(DockerConfig(runtime_dir=tmp_path / "sandboxes"), base_url=other.url)
        assert other.matched == 1  # another address: asked again
