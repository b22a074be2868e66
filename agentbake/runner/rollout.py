"""One rollout in this process: task + image -> its sandbox, its gateway, the harness's steps -> the result.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.errors import SandboxError, TaskError
from agentbake.gateway.settings import LogprobsMode
from agentbake.gateway.trace import load_trace
from agentbake.runner.agents import Agent, AgentImage, AgentLaunch, ModelAccess
from agentbake.runner.backend_registry import BACKENDS
from agentbake.runner.choices import VerifierMode
from agentbake.runner.harness.outcome import HarnessOutcome, describe_error
from agentbake.runner.harness.steps import Harness, oracle_launch
from agentbake.runner.live import LiveRollout, release
from agentbake.runner.network import EGRESS_LOG, PhaseNetworks, RolloutEgress
from agentbake.runner.result import RolloutResult, Status, Timings
from agentbake.runner.runner_config import SCRIPTED_MODEL_NAME, RunnerConfig
from agentbake.runner.sandbox import SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.tasks import Task
from agentbake.tasks.resolver import ImageResolver, ResolvedImage

if TYPE_CHECKING:
    from agentbake.buildkit.labels import ImageLabels
    from agentbake.egress import EgressService
    from agentbake.runner.model.gateways import RolloutGateways

logger = logging.getLogger("agentbake.runner")

TRACE_FILE = "trace.jsonl"
SEQUENCES_FILE = "sequences.json"
"""The rollout's calls as train-ready token sequences with loss masks (`agentbake.export`)."""
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


def new_rollout_id(task: Task) -> str:
    """`<task>-<8 hex>`: readable in `out/`, unique, and valid as a gateway rollout id and a Docker label."""
    return f"{_UNSAFE_ID.sub('-', task.name)[:80].strip('-') or 'task'}-{secrets.token_hex(4)}"


@dataclasses.dataclass
class RolloutSteps:
    """The steps of one rollout run here, from the task's check to its sandbox's release; the `Runner` holds one
    and keeps what spans rollouts (which are live, the abort, the batches)."""

    config: RunnerConfig
    labels: ImageLabels
    agent: Agent | None
    """The agent launched in the sandbox; None for an oracle run."""
    images: ImageResolver
    gateways: RolloutGateways
    backend: SandboxBackend | None
    """None when an executor runs the rollouts (each node builds its own)."""
    backend_type: type[SandboxBackend]
    aborted: threading.Event
    ended: Mapping[str, tuple[Status, str]]
    """Rollouts ended from outside (the runner's, read only here): how, why."""
    egress_service: Callable[[], EgressService]

    def check(self, task: Task) -> None:
        """Refuse a task this run cannot do (on this backend, with these settings) before any sandbox exists."""
        backend = self.backend_type
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

    def run(
        self, task: Task, rollout_id: str, out_dir: Path, timings: Timings, live: LiveRollout, result: RolloutResult
    ) -> HarnessOutcome:
        """Start what the rollout holds (in `live`, so an abort can remove it), run the harness, release it all."""
        backend = self.backend
        assert backend is not None  # an executor runs its rollouts on its nodes, never here
        if self.aborted.is_set():
            raise SandboxError("the batch was aborted before this rollout started")
        token = secrets.token_urlsafe(32)
        with timings.phase("image"):
            image = self.images.resolve(task)
        result.image, result.task_image = image.ref, image.task_image
        # Each phase's network: the task's, or the run's override; through the rollout's egress proxy (the
        # legacy bridge for the verifier when asked). The remote clouds' sandboxes have their own in every phase.
        networks = PhaseNetworks.of(task, self.config)
        capabilities = backend.capabilities
        network = "rules" if capabilities.egress_rules else "backend"
        if capabilities.network_phases:
            network = "bridge" if networks.bridge else "none"
        try:
            if network in ("none", "bridge") and networks.needs_proxy:
                live.egress = RolloutEgress(self.egress_service(), networks, out_dir / EGRESS_LOG)
            in_sandbox = self.config.gateway == "sandbox" and not self.config.oracle
            with timings.phase("create"):  # the gateway is part of what a rollout needs before it starts
                if not self.config.oracle and not in_sandbox:
                    live.runtime_dir, live.gateway = self.gateways.start_on_host(
                        rollout_id, token, out_dir / TRACE_FILE
                    )
                live.handle = backend.create(
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
            if self.aborted.is_set():
                raise SandboxError("the batch was aborted")
            if rollout_id in self.ended:  # ended while its sandbox was being made
                raise SandboxError(self.ended[rollout_id][1])
            if in_sandbox:
                self._start_sandbox_gateway(backend, live.handle, rollout_id, out_dir / TRACE_FILE)
            mode = self._verifier_mode(task)
            able = capabilities.verifier_sandbox
            harness = Harness(
                live.handle,
                task,
                self._launch(task, image, live.handle, token, live.egress),
                out_dir,
                timings,
                oracle=self.config.oracle,
                verifier_network=network,
                archives_in_env=capabilities.large_exec_env,
                egress=live.egress,
                verifier_mode=mode,
                backend=backend if able else None,
                verifier_request=self._verifier_request(task, image, rollout_id) if mode == "separate" else None,
            )
            outcome = harness.run()
            if live.egress is not None:
                outcome.notes += live.egress.notes()  # each refused or failed host, by phase
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
        if self.agent is None:
            return oracle_launch(task, image)
        if handle.model_url is None:
            raise SandboxError(f"sandbox {handle.sandbox_id} has no model_url: the backend did not expose the gateway")
        access = ModelAccess(
            model_url=handle.model_url, token=token, model_name=self.gateways.model_name or SCRIPTED_MODEL_NAME
        )
        launch = self.agent.launch(image, access, task.instruction)
        if resolved.agent_path is None:
            return launch
        # In a task image the agent's command comes from the bundle: on its PATH only, after the image's own.
        return dataclasses.replace(launch, env={**launch.env, "PATH": resolved.agent_path})

    def _start_sandbox_gateway(
        self, backend: SandboxBackend, handle: SandboxHandle, rollout_id: str, trace: Path
    ) -> None:
        if not backend.capabilities.gateway_in_sandbox:
            raise SandboxError(
                f"the {backend.name} backend cannot run the gateway in the sandbox; use gateway='host' or a "
                "remote backend"
            )
        self.gateways.start_in_sandbox(handle, self.labels.python, rollout_id, trace)


def conclude(result: RolloutResult, outcome: HarnessOutcome, timings: Timings, logprobs: LogprobsMode) -> None:
    """Put the outcome, the timings and the trace (`add_trace`) on the result; a trace that cannot be read is a
    note of the result, never an exception."""
    result.status, result.reward, result.error = outcome.status, outcome.reward, outcome.error
    result.notes = outcome.notes
    result.exit_code, result.verifier_exit_code = outcome.exit_code, outcome.verifier_exit_code
    result.timings = timings.finish()
    assert result.out_dir is not None
    try:
        add_trace(result, result.out_dir, logprobs)
    except Exception as exc:
        logger.exception("rollout %s: its trace could not be read", result.rollout_id)
        result.notes.append(f"the trace could not be read: {describe_error(exc)}")


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
