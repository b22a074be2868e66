"""Fixtures the remote backends' tests share: the local containers that stand in for remote sandboxes and the
claude-code image's facts (the image itself: tests/runner/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from agentbake.runner.remote.image_facts import ImageFacts
from tests.runner.fakes.containers import LocalMachines, facts_of, remove_leftovers


@pytest.fixture(scope="module")
def machines(engine: docker.DockerClient) -> Iterator[LocalMachines]:
    """The fake clouds' sandboxes (local containers, no network) of one test module; none may outlive it."""
    local = LocalMachines()
    yield local
    local.remove_all()
    assert remove_leftovers(local) == 0, "a fake remote sandbox outlived its test"


@pytest.fixture
def facts(engine: docker.DockerClient, image: str) -> ImageFacts:
    """What a remote backend reads from the claude-code image's labels."""
    return facts_of(engine, image)
