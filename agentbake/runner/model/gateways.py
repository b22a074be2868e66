"""A runner's model side: the upstream every rollout's gateway calls (checked once by its preflight), the model
name the agents ask for, the scripted model when it is served here, and each rollout's own gateway, on the
host (`host_gateway.py`) or inside its sandbox (`remote/sandbox_gateway.py`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbake.errors import PreflightError, SandboxError
from agentbake.gateway.settings import LogprobsMode
from agentbake.runner.model.host_gateway import remove_stale_gateways, served_model, start_host_gateway
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxHandle
from agentbake.tasks import Task

# The gateway's config (pydantic reads its attribute docstrings from the source) and server load when a rollout
# has a model: an oracle run never needs them.
if TYPE_CHECKING:
    from agentbake.gateway.config import GatewayConfig


class RolloutGateways:
    """What every rollout's gateway shares (upstream, model override, key variable, logprobs mode), and the
    start of one per rollout. Made before the backend: a server that fails the preflight leaves nothing started."""

    def __init__(self, config: RunnerConfig) -> None:
        self.config = config
        self._scripted: Any = None  # the scripted model's server, started by start_scripted
        upstream = config.upstream_url
        remove_stale_gateways()
        # Without --model, the model the upstream serves: what the agent asks for must exist there.
        self.model_name = config.model_name or (served_model(upstream, config.api_key_env) if upstream else None)
        self._shared: GatewayConfig | None = None
        if upstream:
            self._use_upstream(upstream)

    def start_scripted(self, tasks: Iterable[Task]) -> None:
        """`Runner.start_scripted`: the scripted model served here becomes every gateway's upstream."""
        from agentbake.scripted import start_scripted_model

        self.stop_scripted()
        self._scripted = start_scripted_model(list(tasks))
        self._use_upstream(f"{self._scripted.url}/v1")

    def stop_scripted(self) -> None:
        if self._scripted is not None:
            self._scripted.stop()
            self._scripted = None

    def _use_upstream(self, upstream: str) -> None:
        """Point every rollout's gateway at `upstream`, after its preflight (RunnerConfig.preflight, once per
        upstream): PreflightError when its answers cannot be captured; else the gateways stamp the logprobs
        mode it found."""
        from agentbake.gateway.config import GatewayConfig
        from agentbake.gateway.preflight import require_capturable

        gateway = GatewayConfig(
            upstream=upstream,
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
                raise PreflightError(f"model {upstream}: {exc}\n{hint}", report=exc.report) from None
            gateway = gateway.model_copy(update={"logprobs_mode": found})
        self._shared = gateway

    @property
    def upstream(self) -> str | None:
        """The URL every gateway calls (the scripted model's once started); None for the oracle."""
        return None if self._shared is None else self._shared.upstream

    @property
    def logprobs_mode(self) -> LogprobsMode | None:
        """`Runner.logprobs_mode`: what the gateways stamp on their records."""
        return None if self._shared is None else self._shared.logprobs_mode

    def start_on_host(self, rollout_id: str, token: str, trace: Path) -> tuple[Path, Any]:
        """The rollout's gateway in this process (its socket's folder, the served app)."""
        return start_host_gateway(self._shared_config(), rollout_id=rollout_id, token=token, trace=trace)

    def start_in_sandbox(self, handle: SandboxHandle, python: str, rollout_id: str, trace: Path) -> None:
        """The rollout's gateway inside its sandbox, run by the image's `python`, its trace fetched to `trace`."""
        from agentbake.runner.remote.sandbox_gateway import SandboxGateway, start_sandbox_gateway

        gateway = self._shared_config()
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

    def _shared_config(self) -> GatewayConfig:
        if self._shared is None:
            raise SandboxError("model 'scripted' needs Runner.start_scripted(tasks) before a rollout")
        return self._shared
