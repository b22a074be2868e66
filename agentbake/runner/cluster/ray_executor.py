"""`RayExecutor`: each rollout a Ray task on a node with a Docker engine, its folder streamed back.

The driver picks the node itself, so a rollout lost with its node ends as `node_lost` naming it.

    with RayExecutor(RayConfig(address="10.0.0.5:6379")) as executor, Runner(config, executor=executor) as runner:
        runner.run_batch(tasks, repeats=8, concurrency=32)
"""

from __future__ import annotations

import logging
import shutil
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbake.errors import AgentbakeError, ConfigError
from agentbake.runner.cluster.folders import pack_folder, unpack_folder
from agentbake.runner.cluster.node import prepare_image, run_on_node
from agentbake.runner.cluster.nodes import Node, NodeSlots, NoNodeError
from agentbake.runner.cluster.ray_config import RayConfig
from agentbake.runner.harness.outcome import describe_error
from agentbake.runner.result import RESULT_FILE, RolloutResult, Status

if TYPE_CHECKING:
    from agentbake.runner.executor import NodeSettings
    from agentbake.tasks import Task

logger = logging.getLogger("agentbake.runner")


class RayExecutor:
    """Runs a `Runner`'s rollouts on a Ray cluster (`Runner(config, executor=RayExecutor(RayConfig(...)))`);
    connects on creation (to a cluster already started: `ray start`), `close` disconnects."""

    def __init__(self, config: RayConfig) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray on this machine and every node: pip install 'agentbake[ray]'") from None
        self.config = config
        self._ray = ray
        self._own_connection = not ray.is_initialized()
        if self._own_connection:
            _check_reachable(config.address)
            try:
                ray.init(address=config.address, logging_level=logging.ERROR, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(
                    f"--ray {config.address}: no Ray cluster answers there ({exc}); start one with `ray start --head` "
                    "and give its address (HOST:PORT)"
                ) from None
        self.nodes = NodeSlots(config.resource, config.refresh_s, ray.nodes)
        if not self.nodes.count():
            self.close()
            raise ConfigError(
                f"--ray {config.address}: no live node of the cluster advertises the resource {config.resource!r}; "
                f'start each node that has a Docker engine with `ray start --resources \'{{"{config.resource}": '
                "N}'` (N: its rollouts at once), or name their resource with --ray-resource"
            )
        self._prepare = ray.remote(num_cpus=0, max_retries=0)(prepare_image)
        self._run = ray.remote(num_cpus=0, max_retries=0)(run_on_node)
        self._lock = threading.Lock()
        self._task_files: dict[Path, Any] = {}
        self._archive: list[Any] | None = None
        self._running: set[Any] = set()
        self._aborted = threading.Event()
        self._lost_errors = (
            ray.exceptions.NodeDiedError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.LocalRayletDiedError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.TaskUnschedulableError,
            ray.exceptions.RaySystemError,
            ray.exceptions.OutOfMemoryError,  # Ray's memory monitor killed the worker
        )

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Disconnect from the cluster (when this executor connected)."""
        if self._own_connection and self._ray.is_initialized():
            self._ray.shutdown()

    def abort(self) -> None:
        """Cancel the rollouts in flight: each node's runner removes its sandbox and gateway; none writes a result."""
        self._aborted.set()
        with self._lock:
            running = list(self._running)
        for ref in running:
            self._ray.cancel(ref)

    def run(self, task: Task, result: RolloutResult, settings: NodeSettings) -> RolloutResult:
        """The rollout on a node with a free slot, its folder in `result.out_dir`, its result.json naming the node.

        A node lost mid-run gives status `node_lost`, reward 0. A node lost before the start sends it elsewhere."""
        assert result.out_dir is not None
        while True:
            try:
                node = self.nodes.acquire(self._aborted)
            except NoNodeError as exc:
                if self._aborted.is_set():
                    return self._end(result, Status.SANDBOX_ERROR, "the batch was aborted before this rollout started")
                return self._end(result, Status.NODE_LOST, f"node lost: {exc}")
            result.node = node.name
            started = False
            try:
                self._prepared(node, settings.runner.image)
                started = True
                ref = self._run.options(**self._placement(node)).remote(
                    self._task_ref(task), task.name, result.rollout_id, settings
                )
                files = self._get(ref).files
            except self._lost_errors as exc:
                if started and not isinstance(exc, self._ray.exceptions.TaskUnschedulableError):
                    return self._end(result, Status.NODE_LOST, self._lost(node, exc))
                self.nodes.lost(node)
                result.notes.append(f"node {node.name} was lost before the rollout began there ({type(exc).__name__})")
                continue
            except self._ray.exceptions.TaskCancelledError:
                return self._end(result, Status.SANDBOX_ERROR, "the batch was aborted")
            except self._ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                return self._end(result, Status.SANDBOX_ERROR, f"on node {node.name}: {describe_error(cause)}")
            except self._ray.exceptions.RayError as exc:  # Ray's own failure, not the rollout's: the batch goes on
                return self._end(result, Status.SANDBOX_ERROR, f"on node {node.name}: {type(exc).__name__}: {exc}")
            finally:
                self.nodes.release(node)
            return self._received(result, files)

    def _placement(self, node: Node) -> dict[str, Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node.id, soft=False)
        return {"scheduling_strategy": strategy, "resources": {self.config.resource: 1}}

    def _get(self, ref: Any) -> Any:
        with self._lock:
            self._running.add(ref)
        try:
            if self._aborted.is_set():
                self._ray.cancel(ref)
            return self._ray.get(ref)
        finally:
            with self._lock:
                self._running.discard(ref)

    def _prepared(self, node: Node, image: str) -> None:
        """The run's image on `node`'s engine, made so once per node (the first of its rollouts waits for it)."""
        with node.prepare_lock:
            if node.image is None:
                placement = self._placement(node)
                node.image = self._get(self._prepare.options(**placement).remote(image, self._image_archive(image)))
                logger.info("image %s on node %s: %s", image, node.name, node.image)

    def _task_ref(self, task: Task) -> Any:
        """The task's files in the object store, put once per task."""
        with self._lock:
            if task.path not in self._task_files:
                self._task_files[task.path] = self._ray.put(pack_folder(task.path))
            return self._task_files[task.path]

    def _image_archive(self, image: str) -> list[Any]:
        """`[ref]` of the image's `docker save` (made once) when `ship_image`, else `[]`."""
        if not self.config.ship_image:
            return []
        with self._lock:
            if self._archive is None:
                from agentbake.buildkit.engine import connect

                self._archive = [self._ray.put(b"".join(connect().api.get_image(image)))]
            return self._archive

    def _lost(self, node: Node, exc: BaseException) -> str:
        """The error of a rollout lost with its node (or its worker), the node marked dead when it is."""
        what = type(exc).__name__
        died = isinstance(exc, self._ray.exceptions.NodeDiedError)
        if not died and any(info["NodeID"] == node.id and info.get("Alive") for info in self._ray.nodes()):
            return f"node lost: the Ray worker running the rollout on node {node.name} died ({what}); the node lives on"
        self.nodes.lost(node)
        return f"node lost: Ray node {node.name} died while the rollout ran ({what})"

    def _end(self, result: RolloutResult, status: Status, error: str) -> RolloutResult:
        """`result` ended here, not by the node's runner: written unless the batch was aborted."""
        result.status, result.reward, result.error = status, 0.0, error
        if not self._aborted.is_set():
            assert result.out_dir is not None
            if result.out_dir.exists():
                shutil.rmtree(result.out_dir)
            result.out_dir.mkdir(parents=True)
            result.write()
        return result

    def _received(self, result: RolloutResult, files: bytes) -> RolloutResult:
        """The node's folder unpacked into `result.out_dir`, its result.json rewritten naming the node and this
        folder; the trace read back for the caller."""
        from agentbake.gateway.trace import load_trace
        from agentbake.runner.rollout import TRACE_FILE

        out_dir, node = result.out_dir, result.node
        assert out_dir is not None
        if out_dir.exists():
            shutil.rmtree(out_dir)
        unpack_folder(files, out_dir)
        try:
            received = RolloutResult.read(out_dir)
        except AgentbakeError as exc:
            return self._end(result, Status.SANDBOX_ERROR, f"on node {node}: {exc}")
        received.out_dir, received.node = out_dir, node
        received.notes[:0] = result.notes  # the nodes lost before it started
        if (out_dir / TRACE_FILE).exists():
            received.trace = load_trace(out_dir / TRACE_FILE).records
        if self._aborted.is_set():
            (out_dir / RESULT_FILE).unlink(missing_ok=True)  # as a local rollout cut short: not finished
        else:
            received.write()
        return received


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Refuse a `HOST:PORT` nothing listens on at once (Ray itself retries for minutes); `auto` and `ray://` URLs
    are Ray's to check."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(
            f"--ray {address}: no Ray cluster answers there ({exc}); start one with `ray start --head --port PORT` "
            "and give its HOST:PORT"
        ) from None
