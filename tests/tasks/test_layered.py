"""The layered image: the bundle's files in the runnable image, keyed by the environment, made once."""

from __future__ import annotations

import contextlib
import io
import secrets
import threading
from collections.abc import Iterator

import docker
import docker.errors
import pytest

from agentbake.buildkit.engine import image_id
from agentbake.buildkit.labels import LABEL_PREFIX, ImageLabels
from agentbake.errors import TaskImageError
from agentbake.tasks.layered import ENVIRONMENT_LABEL, LayeredImage, environment_hash, layered_image
from agentbake.tasks.prune import Stale, prune_task_artifacts, stale_task_artifacts
from agentbake.tasks.runnable import recipe_version
from tests.tasks.conftest import BOOKWORM

pytestmark = pytest.mark.docker

FACTS = {
    "user": "root",
    "uid": "0",
    "home": "/root",
    "dir_workdir": "/app",
    "dir_task": "/root/task",
    "dir_logs_agent": "/root/logs/agent",
    "dir_logs_verifier": "/root/logs/verifier",
}


def runnable_labels(task: str, image_id: str = "sha256:task") -> dict[str, str]:
    labels = {ImageLabels.key(name): value for name, value in FACTS.items()}
    source = {"task.name": task, "task.image-id": image_id, "runnable.recipe": recipe_version()}
    return {**labels, **{LABEL_PREFIX + key: value for key, value in source.items()}}


def test_the_environment_hash_is_the_environments_not_the_tasks() -> None:
    first = environment_hash(runnable_labels("count-lines"), "agentbake-bundle-aaa")
    assert environment_hash(runnable_labels("another-task"), "agentbake-bundle-aaa") == first
    assert environment_hash(runnable_labels("count-lines"), "agentbake-bundle-bbb") != first  # another agent
    assert environment_hash(runnable_labels("count-lines", "sha256:other"), "agentbake-bundle-aaa") != first
    with pytest.raises(TaskImageError, match=r"not a runnable task image \(labels dev.agentbake.uid"):
        environment_hash({k: v for k, v in runnable_labels("x").items() if not k.endswith(".uid")}, "b")


@pytest.fixture
def parts(engine: docker.DockerClient) -> Iterator[tuple[str, str]]:
    """A small runnable-labelled image and a bundle volume holding one executable (not a real agent: fast)."""
    token = secrets.token_hex(4)
    runnable, volume = f"agentbake-test/layered-{token}:r", f"agentbake-test-bundle-{token}"
    dockerfile = f"FROM {BOOKWORM}\nWORKDIR /app\nUSER nobody\n"
    engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=runnable, labels=runnable_labels(token), rm=True)
    engine.volumes.create(volume)
    fill = "mkdir -p /b/bin && printf '#!/bin/sh\\necho agent\\n' > /b/bin/agent && chmod 755 /b/bin/agent"
    engine.containers.run(BOOKWORM, ["sh", "-c", fill], volumes={volume: {"bind": "/b"}}, remove=True)
    yield runnable, volume
    for image in engine.images.list(filters={"label": f"{LABEL_PREFIX}task.name={token}"}):
        for tag in image.tags:
            engine.images.remove(tag, force=True)
    with contextlib.suppress(docker.errors.NotFound):
        engine.volumes.get(volume).remove(force=True)


def test_two_layerings_at_once_make_one_image_with_the_bundles_files(
    engine: docker.DockerClient, parts: tuple[str, str]
) -> None:
    runnable, volume = parts
    made: list[LayeredImage] = []
    threads = [threading.Thread(target=lambda: made.append(layered_image(engine, runnable, volume))) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(image.cached for image in made) == [False, True]  # one copied, the other found its tag
    assert made[0].id == made[1].id and made[0].tag == f"agentbake-env:{made[0].environment[:12]}"
    config = engine.api.inspect_image(made[0].tag)["Config"]
    assert (config["User"], config["WorkingDir"]) == ("nobody", "/app")
    assert not config["Cmd"] and not config["Entrypoint"]  # the copy's command is not kept
    assert config["Labels"][ENVIRONMENT_LABEL] == made[0].environment
    listing = engine.containers.run(
        made[0].tag, ["sh", "-c", "stat -c '%U %a' /opt/agentbake/bin/agent && /opt/agentbake/bin/agent"], remove=True
    )
    assert listing.decode().split() == ["root", "755", "agent"]
    assert not engine.containers.list(all=True, filters={"name": f"agentbake-layering-{made[0].environment[:12]}"})


def test_a_layered_image_whose_bundle_is_gone_is_pruned(engine: docker.DockerClient, parts: tuple[str, str]) -> None:
    runnable, volume = parts
    made = layered_image(engine, runnable, volume)
    assert made.tag not in {item.name for item in stale_task_artifacts(engine)}
    engine.volumes.get(volume).remove()
    assert Stale(made.tag, "layered", engine.images.get(made.tag).attrs["Size"]) in stale_task_artifacts(engine)
    [pruned] = [r for r in prune_task_artifacts(engine) if r.tag == made.tag]
    assert pruned.removed and image_id(engine, made.tag) is None
