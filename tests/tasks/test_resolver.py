"""The image resolver: a task without an image of its own runs in the agent's image; one with a Dockerfile or a
docker_image runs in its runnable image with the agent's bundle, built once however many rollouts ask."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import ClassVar

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.buildkit.builders import Progress
from agentbake.buildkit.labels import ImageLabels
from agentbake.errors import TaskImageError
from agentbake.tasks import load_task
from agentbake.tasks.bundle import AGENT_BIN, BUNDLE_GIT, bundle_name
from agentbake.tasks.resolver import ImageResolver
from tests.tasks.conftest import BOOKWORM, unique, write_task

pytestmark = pytest.mark.docker


class Shown(Progress):
    """A display per build, recording what it showed and whether it was closed."""

    made: ClassVar[list[Shown]] = []

    def __init__(self, what: str) -> None:
        self.what, self.steps, self.closed = what, 0, False
        Shown.made.append(self)

    def step(self, index: int, total: int, instruction: str) -> None:
        self.steps += 1

    def close(self) -> None:
        self.closed = True


def _labels(engine: docker.DockerClient, built: BuildResult) -> ImageLabels:
    return ImageLabels.from_labels(built.tag, engine.api.inspect_image(built.id)["Config"]["Labels"])


def _resolver(engine: docker.DockerClient, built: BuildResult) -> ImageResolver:
    return ImageResolver(built.tag, _labels(engine, built), client=lambda: engine, progress=Shown)


def test_tasks_without_an_image_run_in_the_agents_image(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], tmp_path: Path
) -> None:
    labels = _labels(engine, built_images["claude-code"])
    resolver = ImageResolver("agentbake/claude-code:x", labels, client=lambda: pytest.fail("no engine call"))
    resolved = resolver.resolve(load_task(write_task(tmp_path, "plain")))
    assert (resolved.ref, resolved.labels, resolved.bundle) == ("agentbake/claude-code:x", labels, None)


def test_dockerfile_task_resolves_once_to_its_runnable_image_and_bundle(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], tmp_path: Path, cleanup: list[str]
) -> None:
    built = built_images["claude-code"]
    name = unique("resolve")
    task = load_task(write_task(tmp_path, name, dockerfile=f"FROM {BOOKWORM}\nWORKDIR /app\nRUN echo {name}\n"))
    resolver = _resolver(engine, built)
    Shown.made.clear()
    results = []
    threads = [threading.Thread(target=lambda: results.append(resolver.resolve(task))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(result) for result in results}) == 1  # four rollouts at once, one resolution
    resolved = results[0]
    cleanup.extend([resolved.task_image or "", resolved.ref])
    assert resolved.ref.startswith(f"agentbake-run/{name}:") and resolved.task_image.startswith("agentbake-task/")
    assert resolved.bundle == bundle_name(built.id)
    assert resolved.labels.agent_command == "claude"  # the agent's facts ...
    assert resolved.labels.dir_workdir == "/app" and resolved.labels.git == BUNDLE_GIT  # ... and the task image's
    assert resolved.agent_path is not None and resolved.agent_path.endswith(f":{AGENT_BIN}")
    assert resolved.agent_path.startswith("/usr/local/sbin:")
    assert resolved.task_image in resolved.built and resolved.ref in resolved.built
    shown = {display.what: display for display in Shown.made}
    assert shown[name].steps and shown[name].closed  # the build was displayed, then closed
    assert all(display.closed for display in Shown.made)
    # A new resolver (another runner, another process) finds everything by its tags.
    Shown.made.clear()
    again = _resolver(engine, built).resolve(task)
    assert (again.ref, again.bundle, again.built) == (resolved.ref, resolved.bundle, ())
    assert Shown.made == []  # nothing built, nothing displayed


def test_docker_image_task_and_a_task_whose_image_fails(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], tmp_path: Path, cleanup: list[str]
) -> None:
    resolver = _resolver(engine, built_images["claude-code"])
    name = unique("prebuilt")
    local = f"agentbake-test/{name}:1"  # stands in for a registry image: built here, tagged with the task's name
    engine.images.build(fileobj=io.BytesIO(f"FROM {BOOKWORM}\nWORKDIR /srv\n".encode()), tag=local, rm=True)
    cleanup.append(local)
    task = load_task(write_task(tmp_path, name, toml=f'[environment]\ndocker_image = "{local}"\n'))
    resolved = resolver.resolve(task)
    cleanup.append(resolved.ref)
    assert resolved.task_image == local and resolved.labels.dir_workdir == "/srv"
    broken = load_task(write_task(tmp_path, "broken", toml='[environment]\ndocker_image = "agentbake-test/none:1"\n'))
    for _ in range(2):  # the second rollout gets the same error without another try
        with pytest.raises(TaskImageError, match=r"task broken: .* could not be pulled"):
            resolver.resolve(broken)
