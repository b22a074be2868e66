"""Fixtures the runner's Docker tests share: the claude-code catalog image, a Docker backend with small limits and
one with room for a real agent CLI."""

from __future__ import annotations

import os
from collections.abc import Iterator

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig


@pytest.fixture(scope="module")
def image(built_images: dict[str, BuildResult]) -> str:
    """The built claude-code catalog image's content tag."""
    return built_images["claude-code"].tag


@pytest.fixture(scope="module")
def backend() -> Iterator[DockerBackend]:
    """A Docker backend per test module (512 MiB, 1 CPU, 256 pids), closed after the module's tests."""
    backend = DockerBackend(DockerConfig(memory_mb=512, cpus=1, pids_limit=256))
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def agent_backend(engine: docker.DockerClient) -> Iterator[DockerBackend]:
    """A Docker backend per test module with room for a real agent CLI or a task's own image (1 GiB, 1 CPU)."""
    backend = DockerBackend(DockerConfig(memory_mb=1024, cpus=1))
    yield backend
    backend.close()


@pytest.fixture
def engine_socket(engine: docker.DockerClient) -> str:
    """The engine's unix socket (for a relay in front of it, `faulty_engine.py`); skips on another DOCKER_HOST."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the fault-injecting relay needs a unix-socket engine, DOCKER_HOST is {host}")
    return host.removeprefix("unix://")
