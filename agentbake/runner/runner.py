"""The runner: rollouts of one image against one model, one at a time or as batches, here or on an executor.

    from agentbake.runner import Runner, RunnerConfig, discover_tasks

    with Runner(RunnerConfig(image="agentbake/claude-code:...", model="scripted")) as runner:
        results = runner.run_batch(discover_tasks(["examples/tasks"]), repeats=4, concurrency=4)

It holds what spans rollouts (the image, the model's gateways, the backend, which rollouts are live, the
abort); one rollout's steps are `rollout.RolloutSteps`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.buildkit.engine import connect
from agentbake.errors import AgentbakeError, ConfigError
from agentbake.gateway.settings import LogprobsMode
from agentbake.runner.agents import agent_for_labels
from agentbake.runner.backend_registry import backend_type, make_backend
from agentbake.runner.batch import BatchProgress, Rollout, repeated, run_rollouts
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.executor import node_settings
from agentbake.runner.harness.outcome import HarnessOutcome, describe_error
from agentbake.runner.images import image_labels
from agentbake.runner.live import LiveRollout, release
from agentbake.runner.model.gateways import RolloutGateways
from agentbake.runner.model.host_gateway import remove_stale_gateways
from agentbake.runner.model.workers import ModelWorkerError, Worker
from agentbake.runner.network import EGRESS_DIR_PREFIX
from agentbake.runner.result import RolloutResult, Status, Timings
from agentbake.runner.rollout import RolloutSteps, conclude, new_rollout_id
from agentbake.runner.runner_config import SCRIPTED, RunnerConfig
from agentbake.runner.sandbox import SandboxBackend
from agentbake.tasks import Task
from agentbake.tasks.resolver import ImageResolver, ProgressFactory

if TYPE_CHECKING:
    from agentbake.egress import EgressConfig, EgressService
    from agentbake.runner.backend_registry import BackendConfig
    from agentbake.runner.executor import Executor

logger = logging.getLogger("agentbake.runner")


class Runner:
    """Runs rollouts of one image against one model; thread-safe, so a trainer can share it."""

    def __init__(
        self,
        config: RunnerConfig,
        backend: SandboxBackend | BackendConfig | None = None,
        *,
        build_progress: ProgressFactory | None = None,
        egress: EgressService | EgressConfig | None = None,
        executor: Executor | None = None,
    ) -> None:
        """`backend`: a backend to use (the caller closes it), or the config of one for the runner to build
        (after the preflight) and close; None builds a Docker backend (with `config.warm` sandboxes kept warm,
        deprecated: `DockerConfig(warm=)` is the setting). `build_progress` displays what a task image's first
        rollout builds (the CLI: its console). `egress`: the egress service the rollouts' proxies run in (the
        caller closes it), or the config of the one the runner starts on the first rollout that needs it
        (default: `EgressConfig()`, its cache under the user's cache dir). `executor`: where each rollout runs
        instead of here (`cluster.RayExecutor`; the caller closes it), each node building the backend `backend`
        configures (a config then, not a built backend)."""
        if config.warm and backend is not None and _warm_pool(backend) != config.warm:
            raise ConfigError(
                f"RunnerConfig.warm={config.warm} (deprecated) differs from the given backend's warm pool "
                f"({_warm_pool(backend)}), which is the one used: set DockerConfig(warm={config.warm}) and drop "
                "RunnerConfig.warm"
            )
        self.config = config
        labels = image_labels(config.image)
        agent = None if config.oracle else agent_for_labels(labels)
        self.images = ImageResolver(
            config.image, labels, client=connect, progress=build_progress, agent_user=config.agent_user
        )
        """Which image each task's rollouts start from (resolve a batch's tasks ahead to build up front)."""
        # Before the backend: a server that fails the preflight leaves nothing started.
        self._gateways = RolloutGateways(config, self._worker_failed)
        self.executor = executor
        self._own_backend = not isinstance(backend, SandboxBackend)
        self._backend_config: BackendConfig | None = None
        if isinstance(backend, SandboxBackend):
            if executor is not None:
                raise ConfigError(
                    "an executor's nodes each build their own backend: pass its config (e.g. DockerConfig()), not a "
                    "built backend"
                )
            self.backend = backend
        else:
            self._backend_config = backend or DockerConfig(warm=config.warm)
            if executor is None:  # else each node builds it
                self.backend = make_backend(self._backend_config)
        self._live: dict[str, LiveRollout] = {}
        self._ended: dict[str, tuple[Status, str]] = {}  # rollouts ended from outside: how, why
        self._lock = threading.Lock()
        self._aborted = threading.Event()
        self._egress_given = egress
        self._egress: EgressService | None = None  # started on the first rollout with a network (the runner's)
        self._steps = RolloutSteps(
            config=config,
            labels=labels,
            agent=agent,
            images=self.images,
            gateways=self._gateways,
            backend=None if executor is not None else self.backend,
            backend_type=type(self.backend) if executor is None else backend_type(self._backend_config),
            aborted=self._aborted,
            ended=self._ended,
            egress_service=self._egress_service,
        )

    # -- lifetime ---------------------------------------------------------------------------------

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_scripted(self, tasks: Iterable[Task]) -> None:
        """Serve the scripted model on loopback for these tasks (`model="scripted"` needs it before a run)."""
        self._gateways.start_scripted(tasks)

    @property
    def logprobs_mode(self) -> LogprobsMode | None:
        """What the model server's logprobs are, as every rollout's gateway stamps them: `logprobs_mode` when
        given, else what the preflight found; None when unknown (no preflight, or no model yet)."""
        return self._gateways.logprobs_mode

    def set_policy_version(self, version: int) -> None:
        """The policy (weights) version the model now serves: every call sent from now on, by any rollout,
        records it (`TraceRecord.policy_version`, the export's rows). A trainer sets it after each weight sync."""
        self._gateways.set_policy_version(version)

    def cancel(self, rollout_id: str, reason: str = "cancelled by the caller") -> bool:
        """End one live rollout now (its sandbox and gateway removed): it finishes as `sandbox_error` with
        `reason`. False when no such rollout runs."""
        return self._end(rollout_id, Status.SANDBOX_ERROR, reason)

    def _end(self, rollout_id: str, status: Status, reason: str) -> bool:
        with self._lock:
            live = self._live.get(rollout_id)
            if live is None:
                return False
            self._ended.setdefault(rollout_id, (status, reason))
        release(live)
        return True

    def _worker_failed(self, worker: Worker, rollout_ids: list[str]) -> None:
        for rollout_id in rollout_ids:
            self._end(rollout_id, Status.MODEL_ERROR, _worker_failure(worker))

    def abort(self) -> None:
        """Remove every live sandbox and gateway now (Ctrl-C, SIGTERM); rollouts in flight end as errors."""
        self._aborted.set()
        with self._lock:
            live = list(self._live.values())
        if self.executor is not None and live:  # only this runner's rollouts: a shared executor goes on serving
            self.executor.abort()
        for entry in live:
            release(entry)

    def close(self) -> None:
        """Remove what live rollouts hold, stop the scripted model, release the backend (when the runner
        made it). Safe to call from a signal's teardown while rollouts run."""
        self.abort()
        self._gateways.close()
        with self._lock:
            egress, self._egress = self._egress, None
        if egress is not None and egress is not self._egress_given:
            egress.close()
        if self._own_backend and self.executor is None:
            self.backend.close()

    def _egress_service(self) -> EgressService:
        """The service every rollout's egress proxy runs in (one cache), started when first needed."""
        from agentbake.egress import EgressService
        from agentbake.egress.service import SOCKET_NAME

        with self._lock:
            if self._egress is None:
                remove_stale_gateways(EGRESS_DIR_PREFIX, SOCKET_NAME)  # the folders of killed runners' proxies
                given = self._egress_given
                self._egress = given if isinstance(given, EgressService) else EgressService(given)
            return self._egress

    # -- one rollout ------------------------------------------------------------------------------

    def run(self, task: Task, *, rollout_id: str | None = None, out_dir: Path | None = None) -> RolloutResult:
        """One rollout into `out_dir` (default `config.out_dir/<rollout_id>`); any failure inside it (the
        sandbox's, an unexpected exception) comes back as status `sandbox_error` with its message, never as an
        exception, so a batch always goes on. A rollout cut short by `abort()` writes no result.json: it did
        not finish (a job's resume runs it again)."""
        self._steps.check(task)
        rollout_id = rollout_id or new_rollout_id(task)
        out_dir = (out_dir or self.config.out_dir / rollout_id).resolve()
        result = RolloutResult(
            rollout_id=rollout_id,
            task=task.name,
            status=Status.OK,
            reward=0.0,
            image=self.config.image,
            agent="oracle" if self._steps.agent is None else self._steps.agent.name,
            agent_version=self._steps.labels.agent_version,
            out_dir=out_dir,
        )
        if self.executor is not None:
            return self._run_elsewhere(self.executor, task, result)
        timings = Timings()
        live = LiveRollout()
        with self._lock:
            self._live[rollout_id] = live
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            outcome = self._steps.run(task, rollout_id, out_dir, timings, live, result)
        except Exception as exc:
            if not isinstance(exc, AgentbakeError):
                logger.exception("rollout %s failed unexpectedly", rollout_id)
            outcome = HarnessOutcome()
            outcome.fail(
                Status.MODEL_ERROR if isinstance(exc, ModelWorkerError) else Status.SANDBOX_ERROR, describe_error(exc)
            )
        finally:
            with self._lock:
                self._live.pop(rollout_id, None)
                ended = self._ended.pop(rollout_id, None)
            worker = self._gateways.finish(rollout_id)
        if worker is not None:
            result.worker = worker.label
            if worker.failure is not None and ended is None:
                ended = Status.MODEL_ERROR, _worker_failure(worker)
        if ended is not None:
            outcome.fail(*ended, decisive=True)
        conclude(result, outcome, timings, self.config.expect_logprobs)
        if not self._aborted.is_set():
            try:
                result.write()
            except OSError as exc:
                logger.error("rollout %s: cannot write %s: %s", rollout_id, out_dir / "result.json", exc)
        return result

    def _run_elsewhere(self, executor: Executor, task: Task, result: RolloutResult) -> RolloutResult:
        """The rollout by the executor; here it holds nothing, an abort cancels it through the executor."""
        if self._aborted.is_set():
            result.status, result.error = Status.SANDBOX_ERROR, "the batch was aborted before this rollout started"
            return result
        assert self._backend_config is not None  # an executor is only taken with a backend's config
        try:
            settings = node_settings(self.config, self._gateways, self._backend_config)
        except AgentbakeError as exc:  # as a local rollout's: its result says why, the batch goes on
            result.status, result.error = Status.SANDBOX_ERROR, describe_error(exc)
            assert result.out_dir is not None
            result.out_dir.mkdir(parents=True, exist_ok=True)
            result.write()
            return result
        with self._lock:
            self._live[result.rollout_id] = LiveRollout()
        try:
            return executor.run(task, result, settings)
        finally:
            with self._lock:
                self._live.pop(result.rollout_id, None)

    # -- batches ----------------------------------------------------------------------------------

    def run_batch(
        self,
        tasks: Iterable[Task],
        *,
        repeats: int = 1,
        concurrency: int = 4,
        on_progress: Callable[[BatchProgress], None] | None = None,
    ) -> list[RolloutResult]:
        """Every task `repeats` times, `concurrency` at once; results in the order of the jobs.

        On Ctrl-C (KeyboardInterrupt) or any exception, and on SIGTERM under the CLI (SystemExit), every
        live sandbox and gateway is removed before it propagates."""
        rollouts = repeated(list(tasks), repeats)
        results: list[RolloutResult | None] = [None] * len(rollouts)
        for index, result in self._run_rollouts(rollouts, concurrency, on_progress):
            results[index] = result
        return [r for r in results if r is not None]

    def iter_batch(
        self,
        tasks: Iterable[Task],
        *,
        repeats: int = 1,
        concurrency: int = 4,
        on_progress: Callable[[BatchProgress], None] | None = None,
    ) -> Iterator[RolloutResult]:
        """As `run_batch`, yielding each result as its rollout ends (a trainer can start on it at once).
        Leaving the loop early cancels the rollouts not yet started and waits for the running ones."""
        yield from self.iter_rollouts(repeated(list(tasks), repeats), concurrency=concurrency, on_progress=on_progress)

    def iter_rollouts(
        self,
        rollouts: Iterable[Rollout],
        *,
        concurrency: int = 4,
        on_progress: Callable[[BatchProgress], None] | None = None,
    ) -> Iterator[RolloutResult]:
        """As `iter_batch`, for rollouts each given its folder (None: `config.out_dir/<rollout_id>`), as a
        job directory lays them out (`<task>__<attempt>`)."""
        for _, result in self._run_rollouts(list(rollouts), concurrency, on_progress):
            yield result

    def _run_rollouts(
        self, rollouts: list[Rollout], concurrency: int, on_progress: Callable[[BatchProgress], None] | None
    ) -> Iterator[tuple[int, RolloutResult]]:
        for task, _ in rollouts:
            self._steps.check(task)  # refuse the batch up front, not rollout by rollout
        yield from run_rollouts(
            rollouts,
            lambda task, out_dir: self.run(task, out_dir=out_dir),
            self.abort,
            concurrency=concurrency,
            on_progress=on_progress,
        )


def run_rollout(
    task: Task, config: RunnerConfig, *, backend: SandboxBackend | BackendConfig | None = None
) -> RolloutResult:
    """One rollout with a runner of its own (a batch shares one `Runner` instead)."""
    with Runner(config, backend) as runner:
        if config.model == SCRIPTED and not config.oracle:
            runner.start_scripted([task])
        return runner.run(task)


def _warm_pool(backend: SandboxBackend | BackendConfig) -> int:
    """The warm pool a given backend, or backend config, keeps: its `DockerConfig.warm`; 0 for the others."""
    from agentbake.runner.docker.backend import DockerBackend

    if isinstance(backend, DockerBackend):
        return backend.config.warm
    return backend.warm if isinstance(backend, DockerConfig) else 0


def _worker_failure(worker: Worker) -> str:
    return (
        f"model worker {worker.label} failed ({worker.failure}); the rollout was pinned to it and is not moved to "
        "another worker mid-conversation"
    )
