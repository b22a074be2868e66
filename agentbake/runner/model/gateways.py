"""A runner's model side: the upstream workers, the model name, the policy version, and each rollout's gateway.

Each worker is checked once by its preflight, and each rollout is pinned to one (`workers.py`). A rollout's gateway runs
on the host (`host_gateway.py`) or inside its sandbox (`remote/sandbox_gateway.py`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbake.errors import PreflightError, SandboxError
from agentbake.gateway.settings import LogprobsMode
from agentbake.runner.model.host_gateway import remove_stale_gateways, served_model, start_host_gateway
from agentbake.runner.model.workers import Worker, Workers, worker_label
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxHandle
from agentbake.tasks import Task

# The gateway's config (pydantic reads its attribute docstrings from the source) and server load when a rollout
# has a model: an oracle run never needs them.
if TYPE_CHECKING:
    from agentbake.gateway.config import GatewayConfig


class RolloutGateways:
    """What every rollout's gateway shares, the workers they call, and the start of one gateway per rollout.

    It is made before the backend, so a server that fails the preflight leaves nothing started.
    `on_worker_failure(worker, rollout_ids)` says a worker stopped answering."""

    def __init__(self, config: RunnerConfig, on_worker_failure: Callable[[Worker, list[str]], None]) -> None:
        self.config = config
        self._scripted: Any = None  # the scripted model's server, started by start_scripted
        self.workers = Workers(on_worker_failure)
        self.policy_version: int | None = None
        self._apps: dict[str, Any] = {}  # each live host gateway's app, to move its policy version
        self._lock = threading.Lock()
        upstreams = config.upstream_urls
        remove_stale_gateways()
        # Without --model, the model the upstream serves: what the agent asks for must exist there.
        self.model_name = config.model_name or (served_model(upstreams[0], config.api_key_env) if upstreams else None)
        if upstreams:
            self._use_upstreams(upstreams)

    def start_scripted(self, tasks: Iterable[Task]) -> None:
        """`Runner.start_scripted`: the scripted model served here becomes every gateway's upstream."""
        from agentbake.scripted import start_scripted_model

        self.stop_scripted()
        self._scripted = start_scripted_model(list(tasks))
        self._use_upstreams([f"{self._scripted.url}/v1"])

    def stop_scripted(self) -> None:
        if self._scripted is not None:
            self._scripted.stop()
            self._scripted = None

    def close(self) -> None:
        """Stop the scripted model and the workers' watch."""
        self.stop_scripted()
        self.workers.close()

    def _use_upstreams(self, upstreams: Iterable[str]) -> None:
        """Point the rollouts' gateways at these workers, after each one's preflight.

        PreflightError when answers cannot be captured or the workers' logprobs modes differ."""
        from agentbake.gateway.config import GatewayConfig
        from agentbake.gateway.preflight import require_capturable

        gateways = []
        for upstream in upstreams:
            gateway = GatewayConfig(
                upstream=upstream,
                worker=worker_label(upstream),
                model_override=self.model_name,
                api_key_env=self.config.api_key_env,
                logprobs_mode=self.config.logprobs_mode,
                **self.config.model_settings.model_dump(),
            )
            if self.config.preflight and self.config.gateway == "host":
                try:
                    found = require_capturable(gateway).logprobs_mode
                except PreflightError as exc:
                    hint = "a run that needs no capture (an evaluation) can skip it: --no-preflight"
                    hint += " (RunnerConfig.preflight)"
                    raise PreflightError(f"model {gateway.worker}: {exc}\n{hint}", report=exc.report) from None
                if gateways and found != gateways[0].logprobs_mode:
                    raise PreflightError(
                        f"model workers {gateways[0].worker} and {gateway.worker} send different logprobs "
                        f"({gateways[0].logprobs_mode}, {found}): serve them alike (vLLM --logprobs-mode)"
                    )
                gateway = gateway.model_copy(update={"logprobs_mode": found})
            gateways.append(gateway)
        # Sandbox gateways reach the workers by addresses this host may not: no watch from here.
        self.workers.use(gateways, watch=self.config.gateway == "host")

    @property
    def upstreams(self) -> tuple[str, ...]:
        """The workers' URLs (the scripted model's once started); empty for the oracle."""
        return tuple(worker.gateway.upstream for worker in self.workers.all)

    @property
    def logprobs_mode(self) -> LogprobsMode | None:
        """`Runner.logprobs_mode`: what the gateways stamp on their records."""
        workers = self.workers.all
        return workers[0].gateway.logprobs_mode if workers else None

    def set_policy_version(self, version: int) -> None:
        """`Runner.set_policy_version`: the version on every record from now on, live host gateways' too."""
        with self._lock:
            self.policy_version = version
            for app in self._apps.values():
                app.calls.policy_version = version

    def start_on_host(self, rollout_id: str, token: str, trace: Path) -> tuple[Path, Any]:
        """The rollout's gateway in this process, on its worker (its socket's folder, the served app)."""
        with self._lock:
            shared = self._pin(rollout_id)
            runtime_dir, served, app = start_host_gateway(shared, rollout_id=rollout_id, token=token, trace=trace)
            self._apps[rollout_id] = app
        return runtime_dir, served

    def finish(self, rollout_id: str) -> Worker | None:
        """The rollout ended: off its worker (returned, None when it had none)."""
        with self._lock:
            self._apps.pop(rollout_id, None)
        return self.workers.done(rollout_id)

    def start_in_sandbox(self, handle: SandboxHandle, python: str, rollout_id: str, trace: Path) -> None:
        """The rollout's gateway inside its sandbox, run by the image's `python`, its trace fetched to `trace`."""
        from agentbake.runner.remote.sandbox_gateway import SandboxGateway, start_sandbox_gateway

        gateway = self._pin(rollout_id)
        spec = SandboxGateway(
            upstream=gateway.upstream,
            rollout_id=rollout_id,
            trace=trace,
            api_key_env=gateway.api_key_env,
            api_key=os.environ.get(gateway.api_key_env),
            model_override=gateway.model_override,
            logprobs_mode=gateway.logprobs_mode,
            settings=self.config.model_settings,
        )
        start_sandbox_gateway(handle, python, spec)

    def _pin(self, rollout_id: str) -> GatewayConfig:
        """The gateway settings of the worker the rollout stays on, with the policy version now."""
        if not self.workers.all:
            raise SandboxError("model 'scripted' needs Runner.start_scripted(tasks) before a rollout")
        gateway = self.workers.pick(rollout_id).gateway
        return gateway.model_copy(update={"policy_version": self.policy_version})
