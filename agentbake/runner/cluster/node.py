"""What runs on a cluster node, in a Ray worker: the run's image made present, and one rollout.

`prepare_image` runs once per node. `run_on_node` runs a rollout with a runner of the worker's own, in a scratch folder
whose files go back to the driver as bytes.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbake.errors import SandboxError
from agentbake.runner.cluster.folders import pack_folder, unpack_folder
from agentbake.runner.docker.labels import owner_alive, this_process

if TYPE_CHECKING:
    from agentbake.runner.executor import NodeSettings
    from agentbake.runner.runner import Runner

SCRATCH_PREFIX = "agentbake-node-"
"""A rollout's scratch folder on its node: `agentbake-node-<pid>-<start time>-<random>`, by the worker's process."""
CATALOG_PREFIX = "agentbake/"
"""A catalog image's repository prefix: `agentbake/<name>:<content tag>` is built from the node's catalog."""

_runners: dict[str, Runner] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class NodeRollout:
    """What comes back from a node: the rollout's folder as `pack_folder` bytes (result.json included)."""

    files: bytes


def prepare_image(image: str, archive: list[Any]) -> str:
    """Make `image` present on this node's engine, and say how it got there.

    It is loaded from `archive`, a `docker save` in Ray's object store, when given. Otherwise the node's catalog builds
    it, and must give the same content tag."""
    from agentbake.buildkit.engine import connect, find_image

    client = connect()
    if find_image(client, image) is not None:
        return "present"
    if archive:
        import ray

        client.images.load(ray.get(archive[0]))
        if find_image(client, image) is None:
            raise SandboxError(f"the archive the driver shipped does not hold {image!r}")
        return "loaded"
    name, _, tag = image.removeprefix(CATALOG_PREFIX).partition(":")
    if not image.startswith(CATALOG_PREFIX) or not tag:
        raise SandboxError(
            f"image {image!r} is not on this node's engine and is no catalog image to build here; ship it from the "
            "driver (RayConfig.ship_image, `--ray-ship-image`)"
        )
    from agentbake.runner.images import resolve_image

    built = resolve_image(name)
    if built != image:
        raise SandboxError(
            f"this node's catalog builds {built!r} for {name!r}, the run uses {image!r}: install the driver's "
            "agentbake (and catalog) on every node, or ship the image (`--ray-ship-image`)"
        )
    return "built"


def run_on_node(task_files: bytes, task_name: str, rollout_id: str, settings: NodeSettings) -> NodeRollout:
    """One rollout of the task whose files are `task_files`, by this worker's runner for `settings`."""
    from agentbake.tasks import load_task

    runner = _runner(settings)
    _, pid, start = this_process().rsplit(":", 2)
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{pid}-{start}-") as scratch:
        root = Path(scratch)
        unpack_folder(task_files, root / "task" / task_name)
        out_dir = root / "rollout"
        runner.run(load_task(root / "task" / task_name), rollout_id=rollout_id, out_dir=out_dir)
        return NodeRollout(pack_folder(out_dir))


def _runner(settings: NodeSettings) -> Runner:
    """The worker's runner for these settings, made on first use and closed when the worker exits."""
    from agentbake.runner.runner import Runner

    key = f"{settings.runner.model_dump_json()}|{type(settings.backend).__name__}|{settings.backend.model_dump_json()}"
    with _lock:
        runner = _runners.get(key)
        if runner is None:
            if not _runners:
                atexit.register(_close_all)
                remove_stale_scratch()
            runner = _runners[key] = Runner(settings.runner, settings.backend)
        return runner


def remove_stale_scratch() -> list[Path]:
    """Remove the scratch folders of workers that died mid-rollout (their node's raylet killed): those whose
    process is gone. Returns what was removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid, _, rest = folder.name.removeprefix(SCRATCH_PREFIX).partition("-")
        if owner_alive(f"{socket.gethostname()}:{pid}:{rest.partition('-')[0]}") is False:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _close_all() -> None:
    with _lock:
        runners = list(_runners.values())
        _runners.clear()
    for runner in runners:
        runner.close()
