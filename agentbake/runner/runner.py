"""Rollouts: task + image + model -> sandbox, a gateway of its own, the harness's steps -> RolloutResult.

    from agentbake.runner import Runner, RunnerConfig, discover_tasks

    with Runner(RunnerConfig(image="agentbake/claude-code:...", model="scripted")) as runner:
        results = runner.run_batch(discover_tasks(["examples/tasks"]), repeats=4, concurrency=4)

A task with an image of its own (environment/Dockerfile, docker_image) runs in that image with the agent
layered on at run time (agentbake.tasks.resolver: built once, cached, no network, nothing installed).

Each rollout gets a gateway on a unix socket in a private folder, a fresh random client token (the only
credential the agent holds, worthless anywhere else), and its own trace file `out/<id>/trace.jsonl`. The
upstream API key is read by the gateway in this process from the variable named by `api_key_env`; it is
never given to the sandbox.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.buildkit.engine import connect
from agentbake.errors import AgentbakeError, ConfigError, SandboxError, TaskError
from agentbake.gateway.settings import LogprobsMode
from agentbake.gateway.trace import load_trace
from agentbake.runner.agents import AgentImage, AgentLaunch, ModelAccess, agent_for_labels
from agentbake.runner.backend_registry import BACKENDS, backend_type, make_backend
from agentbake.runner.batch import BatchProgress, Rollout, repeated, run_rollouts
from agentbake.runner.choices import VerifierMode
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.harness.outcome import HarnessOutcome, describe_error
from agentbake.runner.harness.steps import Harness, oracle_launch
from agentbake.runner.images import image_labels
from agentbake.runner.live import LiveRollout, release
from agentbake.runner.model.gateways import RolloutGateways
from agentbake.runner.model.host_gateway import remove_stale_gateways
from agentbake.runner.model.workers import ModelWorkerError, Worker
from agentbake.runner.network import EGRESS_DIR_PREFIX, EGRESS_LOG, PhaseNetworks, RolloutEgress
from agentbake.runner.result import RolloutResult, Status, Timings
from agentbake.runner.runner_config import SCRIPTED, SCRIPTED_MODEL_NAME, RunnerConfig
from agentbake.runner.sandbox import SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.tasks import Task
from agentbake.tasks.resolver import ImageResolver, ProgressFactory, ResolvedImage

if TYPE_CHECKING:
    from agentbake.egress import EgressConfig, EgressService
    from agentbake.runner.backend_registry import BackendConfig
    from agentbake.runner.executor import Executor, NodeSettings

logger = logging.getLogger("agentbake.runner")

TRACE_FILE = "trace.jsonl"
SEQUENCES_FILE = "sequences.json"
"""The rollout's calls as train-ready token sequences with loss masks (`agentbake.export`)."""
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


def new_rollout_id(task: Task) -> str:
    """`<task>-<8 hex>`: readable in `out/`, unique, and valid as a gateway rollout id and a Docker label."""
    return f"{_UNSAFE_ID.sub('-', task.name)[:80].strip('-') or 'task'}-{secrets.token_hex(4)}"


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
        self._labels = image_labels(config.image)
        self._agent = None if config.oracle else agent_for_labels(self._labels)
        self.images = ImageResolver(
            config.image, self._labels, client=connect, progress=build_progress, agent_user=config.agent_user
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
        self._backend_type = type(self.backend) if executor is None else backend_type(self._backend_config)
        self._live: dict[str, LiveRollout] = {}
        self._ended: dict[str, tuple[Status, str]] = {}  # rollouts ended from outside: how, why
        self._lock = threading.Lock()
        self._aborted = threading.Event()
        self._egress_given = egress
        self._egress: EgressService | None = None  # started on the first rollout with a network (the runner's)

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
        self._check(task)
        rollout_id = rollout_id or new_rollout_id(task)
        out_dir = (out_dir or self.config.out_dir / rollout_id).resolve()
        result = RolloutResult(
            rollout_id=rollout_id,
            task=task.name,
            status=Status.OK,
            reward=0.0,
            image=self.config.image,
            agent="oracle" if self._agent is None else self._agent.name,
            agent_version=self._labels.agent_version,
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
            outcome = self._run(task, rollout_id, out_dir, timings, live, result)
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
        result.status, result.reward, result.error = outcome.status, outcome.reward, outcome.error
        result.notes = outcome.notes
        result.exit_code, result.verifier_exit_code = outcome.exit_code, outcome.verifier_exit_code
        result.timings = timings.finish()
        try:
            add_trace(result, out_dir, self.config.expect_logprobs)
        except Exception as exc:
            logger.exception("rollout %s: its trace could not be read", rollout_id)
            result.notes.append(f"the trace could not be read: {describe_error(exc)}")
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
        try:
            settings = self._node_settings()
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

    def _node_settings(self) -> NodeSettings:
        """The settings an executor's node runs a rollout with: the model as resolved here (no second preflight)."""
        from agentbake.runner.executor import NodeSettings

        scripted = self.config.model == SCRIPTED and not self.config.oracle
        update = {
            "model": _one_or_all(self._gateways.upstreams) or self.config.model,
            "model_name": self._gateways.model_name or (SCRIPTED_MODEL_NAME if scripted else None),
            "logprobs_mode": self.logprobs_mode,
            "preflight": False,
        }
        if scripted and not self._gateways.upstreams:
            raise SandboxError("model 'scripted' needs Runner.start_scripted(tasks) before a rollout")
        assert self._backend_config is not None  # an executor is only taken with a backend's config
        return NodeSettings(self.config.model_copy(update=update), self._backend_config)

    def _check(self, task: Task) -> None:
        backend = self._backend_type
        if self.config.oracle and task.solution_script is None:
            raise TaskError(f"{task.path}: no solution/solve.sh; --oracle runs the task's reference solution")
        capabilities = backend.capabilities
        if not capabilities.network_phases:
            in_sandbox = self.config.gateway == "sandbox" and not self.config.oracle
            PhaseNetworks.of(task, self.config).check_remote(
                task, backend.name, rules=capabilities.egress_rules, gateway_in_sandbox=in_sandbox
            )
        if self._verifier_mode(task) == "separate" and not capabilities.verifier_sandbox:
            able = ", ".join(name for name, kind in BACKENDS.items() if kind.backend.capabilities.verifier_sandbox)
            why = (
                "--verifier-mode separate" if self.config.verifier_mode else '[verifier] environment_mode = "separate"'
            )
            raise TaskError(
                f"{task.path}: {why} runs the verifier in a sandbox of its own, which the {backend.name} backend "
                f"cannot make; run it with --backend {able}, or with --verifier-mode shared"
            )
        if not task.has_own_image:
            self.images.check_catalog_user(task)
        elif not backend.capabilities.task_images:
            able = ", ".join(name for name, kind in BACKENDS.items() if kind.backend.capabilities.task_images)
            raise TaskError(
                f"{task.path}: the task brings its own image (environment/Dockerfile or docker_image), which the "
                f"{backend.name} backend cannot run yet; run it with --backend {able}"
            )

    def _verifier_mode(self, task: Task) -> VerifierMode:
        """The run's `--verifier-mode`, else the task's `[verifier] environment_mode`."""
        return self.config.verifier_mode or task.verifier_mode

    def _verifier_request(self, task: Task, image: ResolvedImage, rollout_id: str) -> SandboxRequest:
        """Separate mode's fresh sandbox: `[verifier.environment]`'s image (resolved as a task's own image is) and
        resources when given, else the agent's sandbox's image; its `env` in every process there."""
        own = task.verifier_environment
        if own is not None and own.docker_image is not None:
            image = self.images.resolve(
                dataclasses.replace(
                    task, docker_image=own.docker_image, dockerfile=None, path=task.path / "[verifier.environment]"
                )
            )
        return SandboxRequest(
            image=image.ref,
            rollout_id=rollout_id,
            cpus=(own.cpus if own else None) or self.config.cpus or task.cpus,
            memory_mb=(own.memory_mb if own else None) or self.config.memory_mb or task.memory_mb,
            envs=dict(own.env) if own else {},
            agent_bundle=image.bundle,
        )

    def _run(
        self, task: Task, rollout_id: str, out_dir: Path, timings: Timings, live: LiveRollout, result: RolloutResult
    ) -> HarnessOutcome:
        if self._aborted.is_set():
            raise SandboxError("the batch was aborted before this rollout started")
        token = secrets.token_urlsafe(32)
        with timings.phase("image"):
            image = self.images.resolve(task)
        result.image, result.task_image = image.ref, image.task_image
        # Each phase's network: the task's, or the run's override; through the rollout's egress proxy (the
        # legacy bridge for the verifier when asked). The remote clouds' sandboxes have their own in every phase.
        networks = PhaseNetworks.of(task, self.config)
        capabilities = self.backend.capabilities
        network = "rules" if capabilities.egress_rules else "backend"
        if capabilities.network_phases:
            network = "bridge" if networks.bridge else "none"
        try:
            if network in ("none", "bridge") and networks.needs_proxy:
                live.egress = RolloutEgress(self._egress_service(), networks, out_dir / EGRESS_LOG)
            in_sandbox = self.config.gateway == "sandbox" and not self.config.oracle
            with timings.phase("create"):  # the gateway is part of what a rollout needs before it starts
                if not self.config.oracle and not in_sandbox:
                    live.runtime_dir, live.gateway = self._gateways.start_on_host(
                        rollout_id, token, out_dir / TRACE_FILE
                    )
                live.handle = self.backend.create(
                    SandboxRequest(
                        image=image.ref,
                        rollout_id=rollout_id,
                        cpus=self.config.cpus or task.cpus,
                        memory_mb=self.config.memory_mb or task.memory_mb,
                        storage_mb=self.config.storage_mb or task.storage_mb,
                        gateway_socket=None if live.gateway is None else str(live.gateway.uds),
                        agent_bundle=image.bundle,
                        egress_socket=None if live.egress is None else live.egress.socket_path,
                        verifier_network=network == "bridge",
                        networks=networks if network == "rules" else None,
                    )
                )
                if live.egress is not None:
                    live.egress.port = live.handle.egress_port
            if self._aborted.is_set():
                raise SandboxError("the batch was aborted")
            if rollout_id in self._ended:  # ended while its sandbox was being made
                raise SandboxError(self._ended[rollout_id][1])
            if in_sandbox:
                self._start_sandbox_gateway(live.handle, rollout_id, out_dir / TRACE_FILE)
            mode = self._verifier_mode(task)
            able = self.backend.capabilities.verifier_sandbox
            harness = Harness(
                live.handle,
                task,
                self._launch(task, image, live.handle, token, live.egress),
                out_dir,
                timings,
                oracle=self.config.oracle,
                verifier_network=network,
                archives_in_env=self.backend.capabilities.large_exec_env,
                egress=live.egress,
                verifier_mode=mode,
                backend=self.backend if able else None,
                verifier_request=self._verifier_request(task, image, rollout_id) if mode == "separate" else None,
            )
            outcome = harness.run()
            if live.egress is not None:
                outcome.notes += live.egress.notes()  # each refused host, by phase
        except BaseException:
            with timings.phase("teardown"):
                release(live)  # never raises: the original error is what the caller sees
            raise
        with timings.phase("teardown"):
            release(live, strict=True)
        return outcome

    def _launch(
        self, task: Task, resolved: ResolvedImage, handle: SandboxHandle, token: str, egress: RolloutEgress | None
    ) -> AgentLaunch:
        launch = self._agent_launch(task, resolved, handle, token)
        if egress is None:
            return launch
        # The agent phase's proxy variables on the agent's own command (never the container's config).
        return dataclasses.replace(launch, env={**egress.env(), **launch.env})

    def _agent_launch(self, task: Task, resolved: ResolvedImage, handle: SandboxHandle, token: str) -> AgentLaunch:
        image = AgentImage.from_labels(resolved.labels, home=handle.home)
        if self._agent is None:
            return oracle_launch(task, image)
        if handle.model_url is None:
            raise SandboxError(f"sandbox {handle.sandbox_id} has no model_url: the backend did not expose the gateway")
        access = ModelAccess(
            model_url=handle.model_url, token=token, model_name=self._gateways.model_name or SCRIPTED_MODEL_NAME
        )
        launch = self._agent.launch(image, access, task.instruction)
        if resolved.agent_path is None:
            return launch
        # In a task image the agent's command comes from the bundle: on its PATH only, after the image's own.
        return dataclasses.replace(launch, env={**launch.env, "PATH": resolved.agent_path})

    def _start_sandbox_gateway(self, handle: SandboxHandle, rollout_id: str, trace: Path) -> None:
        if not self.backend.capabilities.gateway_in_sandbox:
            raise SandboxError(
                f"the {self.backend.name} backend cannot run the gateway in the sandbox; use gateway='host' or a "
                "remote backend"
            )
        self._gateways.start_in_sandbox(handle, self._labels.python, rollout_id, trace)

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
            self._check(task)  # refuse the batch up front, not rollout by rollout
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


def _one_or_all(urls: tuple[str, ...]) -> str | tuple[str, ...] | None:
    """`RunnerConfig.model` for these worker URLs: one as a string, several as a tuple, none as None."""
    return urls[0] if len(urls) == 1 else (urls or None)


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


def add_trace(result: RolloutResult, out_dir: Path, logprobs: LogprobsMode) -> None:
    """Read the rollout's trace (`out_dir/trace.jsonl`) once: its records and totals on the result, each line it
    skips a note of the result, and its training export (for a trainer expecting `logprobs`) in sequences.json.
    No trace (an oracle run: no model calls), nothing: the export is not even imported."""
    if not (out_dir / TRACE_FILE).exists():
        return
    trace = load_trace(out_dir / TRACE_FILE)
    result.trace = trace.records
    result.turns = len(trace.records)
    result.tokens = sum(len(r.completion_token_ids) for r in trace.records)
    result.calls_without_token_ids = sum(r.ok and not r.completion_token_ids for r in trace.records)
    result.notes += [f"trace: {skipped.message}" for skipped in trace.skipped]
    from agentbake.export import export_trace, write_document

    document = export_trace(trace, result.rollout_id, logprobs=logprobs)
    result.trainable = bool(write_document(document, out_dir / SEQUENCES_FILE)["trainable"])
