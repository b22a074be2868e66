"""The image facts a remote backend reads from the local image's labels (ImageLabels)."""

from __future__ import annotations

import docker
import pytest

from agentbake.errors import AgentError, SandboxError
from agentbake.runner.remote.image_facts import ImageFacts
from tests.runner.fakes.containers import facts_of

pytestmark = pytest.mark.docker


def test_facts_come_from_the_images_labels(engine: docker.DockerClient, image: str) -> None:
    labels = engine.images.get(image).labels
    facts = facts_of(engine, image)
    assert (facts.ref, facts.name, facts.content_hash) == (image, "claude-code", labels["dev.agentbake.spec-hash"])
    assert (facts.user, facts.python) == (labels["dev.agentbake.user"], labels["dev.agentbake.python"])
    assert facts.paths["workdir"] == labels["dev.agentbake.dir.workdir"]


def test_a_root_user_or_a_missing_label_is_refused(engine: docker.DockerClient, image: str) -> None:
    with pytest.raises(SandboxError, match=f"image '{image}' has no label dev.agentbake.user naming a non-root user"):
        facts_of(engine, image, user="root")
    labels = {k: v for k, v in engine.images.get(image).labels.items() if k != "dev.agentbake.spec-hash"}
    with pytest.raises(AgentError, match=f"image '{image}' lacks the label\\(s\\) dev.agentbake.spec-hash"):
        ImageFacts.from_labels(image, labels)
