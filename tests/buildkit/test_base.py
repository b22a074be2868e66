"""`agentbake base debian`: finds an existing base instead of rebuilding it."""

from __future__ import annotations

import docker
import pytest

from agentbake.buildkit.base import DEFAULT_MIRROR, MIRROR_LABEL, SUITE_LABEL, debian_base

pytestmark = pytest.mark.docker


def test_existing_base_is_kept(engine: docker.DockerClient) -> None:
    image = engine.images.get("debian:bookworm-slim")
    result = debian_base(engine, "bookworm")
    assert (result.tag, result.id, result.created) == ("debian:bookworm-slim", image.id, False)


def test_offline_base_records_suite_and_mirror(engine: docker.DockerClient) -> None:
    labels = engine.images.get("debian:trixie-slim").labels or {}
    if SUITE_LABEL not in labels:
        pytest.skip("debian:trixie-slim came from a registry here, not from `agentbake base debian`")
    assert labels[SUITE_LABEL] == "trixie" and labels[MIRROR_LABEL] == DEFAULT_MIRROR


def test_registry_image_without_labels_is_not_replaced(engine: docker.DockerClient) -> None:
    # An image under the tag that agentbake did not make (no suite label) stands as it is.
    source = engine.images.get("agentbake/opencode:latest")
    source.tag("agentbake-test/registry-debian", "12")
    try:
        result = debian_base(engine, "bookworm", tag="agentbake-test/registry-debian:12")
        assert not result.created and result.id == source.id
    finally:
        engine.images.remove("agentbake-test/registry-debian:12")
