"""Fixtures of the publish tests: a real registry on 127.0.0.1 (see registry_service.py) and a small image."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from tests.publish.registry_service import RunningRegistry, build_registry_image, cached_build, run_registry


@pytest.fixture(scope="session")
def registry_image(engine: docker.DockerClient) -> str:
    return build_registry_image(engine)


@pytest.fixture(scope="session")
def registry(registry_image: str) -> Iterator[RunningRegistry]:
    """One open registry for the session; tests use their own repository paths in it."""
    with run_registry(registry_image) as running:
        yield running


@pytest.fixture(scope="session")
def small_image(engine: docker.DockerClient) -> str:
    """A small image with a layer of its own (so pushes upload something besides the base)."""
    files = {"Dockerfile": b"FROM debian:bookworm-slim\nRUN echo agentbake-publish-test > /etc/agentbake-test\n"}
    return cached_build(engine, "small", files)


@pytest.fixture(scope="session")
def tiny_image(engine: docker.DockerClient) -> str:
    """An image of one small file on no base: pushed in well under a second."""
    files = {"Dockerfile": b"FROM scratch\nCOPY marker /marker\n", "marker": b"agentbake-publish-test\n"}
    return cached_build(engine, "tiny", files)
