"""`agentbake prune`'s part for task images: runnable images of another recipe and agent bundles no current
agent image makes are removed; the current ones, and a bundle a running sandbox mounts, stay."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.tasks.bundle import BUNDLE_LABEL, BUNDLE_MOUNT, ensure_bundle
from agentbake.tasks.image import build_task_image
from agentbake.tasks.prune import prune_task_artifacts, stale_task_artifacts
from agentbake.tasks.runnable import RECIPE_LABEL, runnable_image
from tests.tasks.conftest import BOOKWORM, unique, write_task

pytestmark = pytest.mark.docker


@pytest.fixture
def stale_bundle(engine: docker.DockerClient, built_images: dict[str, BuildResult]) -> Iterator[str]:
    """A bundle as an older bundle script named it: its volume and the exited container recording it."""
    name = f"agentbake-bundle-{unique('old')}"
    labels = {BUNDLE_LABEL: built_images["claude-code"].id}
    engine.volumes.create(name, labels=labels)
    recorder = engine.containers.create(BOOKWORM, ["true"], name=name, labels=labels, volumes={name: {"bind": "/b"}})
    recorder.start()
    recorder.wait()
    yield name
    with contextlib.suppress(docker.errors.NotFound):
        engine.containers.get(name).remove(force=True)
    with contextlib.suppress(docker.errors.NotFound):
        engine.volumes.get(name).remove()


def test_what_this_agentbake_no_longer_makes_is_pruned_and_the_current_stays(
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    tmp_path: Path,
    cleanup: list[str],
    stale_bundle: str,
) -> None:
    name = unique("prune")
    env = write_task(tmp_path, name, dockerfile=f"FROM {BOOKWORM}\nWORKDIR /app\n") / "environment"
    task_image = build_task_image(engine, name, env, timeout_s=300)
    current = runnable_image(engine, name, task_image)
    old = f"agentbake-run/{name}:000000000000"  # what an older recipe built for the same task image
    dockerfile = f'FROM {task_image.id}\nLABEL dev.agentbake.task.image="{task_image.ref}" {RECIPE_LABEL}="old"\n'
    engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=old, rm=True)
    cleanup.extend([task_image.ref, current.tag, old])
    bundle = ensure_bundle(engine, built_images["claude-code"].tag)

    listed = {item.name for item in stale_task_artifacts(engine)}
    assert {old, stale_bundle} <= listed and not {current.tag, bundle.volume} & listed
    assert {r.tag for r in prune_task_artifacts(engine, dry_run=True) if not r.removed} >= {old, stale_bundle}
    assert engine.images.get(old) and engine.volumes.get(stale_bundle)  # a dry run removes nothing

    pruned = {result.tag: result for result in prune_task_artifacts(engine)}
    assert pruned[old].removed and pruned[stale_bundle].removed
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(old)
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(stale_bundle)
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(stale_bundle)
    assert engine.images.get(current.tag) and engine.volumes.get(bundle.volume)


def test_a_stale_bundle_a_running_sandbox_mounts_is_kept(engine: docker.DockerClient, stale_bundle: str) -> None:
    user = engine.containers.run(
        BOOKWORM, ["sleep", "60"], detach=True, volumes={stale_bundle: {"bind": BUNDLE_MOUNT, "mode": "ro"}}
    )
    try:
        (result,) = [r for r in prune_task_artifacts(engine) if r.tag == stale_bundle]
        assert not result.removed and result.reason == "in use"
        assert engine.volumes.get(stale_bundle) and engine.containers.get(stale_bundle)
    finally:
        user.remove(force=True)
