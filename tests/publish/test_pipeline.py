"""The pipeline's registry decisions: no build when the registry holds the tag; another local build is pushed."""

from __future__ import annotations

import uuid

import docker
import pytest

from agentbake.buildkit.build import BuildPlan
from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.engine import find_image
from agentbake.buildkit.render import render
from agentbake.publish.manifest import Published
from agentbake.publish.pipeline import PublishOptions, publish_image
from agentbake.publish.registry import Distribution, Repository, push_image
from tests.publish.registry_service import RunningRegistry

pytestmark = pytest.mark.docker


@pytest.fixture
def unbuilt_plan(catalog: Catalog) -> BuildPlan:
    """A plan whose content-hash tag the engine does not have (a made-up hash over a real rendering)."""
    rendered = render(catalog.load("opencode"), catalog.templates_dir)
    return BuildPlan(rendered=rendered, digest=uuid.uuid4().hex * 2, base_id="sha256:" + "0" * 64)


def test_a_tag_the_registry_holds_is_skipped_without_building(
    engine: docker.DockerClient, registry: RunningRegistry, small_image: str, unbuilt_plan: BuildPlan
) -> None:
    prefix = Repository.parse(registry.repository(f"pl-{uuid.uuid4().hex[:8]}"))
    tag = unbuilt_plan.digest[:12]
    # Another machine published these inputs already.
    dist = Distribution(prefix.child("opencode"), None)
    first = push_image(engine, engine.images.get(small_image), dist, tag, None)
    published = Published()

    [result] = publish_image(engine, unbuilt_plan, PublishOptions(registry=prefix), published)
    assert (result.action, result.digest) == ("skipped", first.digest)
    assert find_image(engine, unbuilt_plan.tag) is None  # nothing was built
    assert published.resolve("opencode").registry[dist.repository.reference].digest == first.digest


def test_a_different_local_build_of_the_same_tag_is_pushed_over_it(
    engine: docker.DockerClient, registry: RunningRegistry, small_image: str, registry_image: str, unbuilt_plan
) -> None:
    prefix = Repository.parse(registry.repository(f"pl-{uuid.uuid4().hex[:8]}"))
    tag = unbuilt_plan.digest[:12]
    dist = Distribution(prefix.child("opencode"), None)
    push_image(engine, engine.images.get(small_image), dist, tag, None)
    # The engine now has its own build under the plan's tag: the one the user tested wins.
    engine.images.get(registry_image).tag(*unbuilt_plan.tag.split(":"))
    try:
        [result] = publish_image(engine, unbuilt_plan, PublishOptions(registry=prefix), Published())
        assert result.action == "pushed"
        assert dist.manifest(tag).config_digest == engine.images.get(registry_image).id
        assert dist.manifest("latest").digest == result.digest
    finally:
        engine.images.remove(unbuilt_plan.tag, noprune=True)


def test_a_failed_publish_records_nothing(engine: docker.DockerClient, unbuilt_plan: BuildPlan) -> None:
    published = Published()
    options = PublishOptions(registry=Repository.parse("127.0.0.1:9/agentbake"), retries=0)
    [result] = publish_image(engine, unbuilt_plan, options, published)
    assert result.action == "failed" and "does not answer" in result.error
    assert published.images == {} and published.current == {}
