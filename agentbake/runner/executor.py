"""Where a `Runner`'s rollouts run when not in its own process.

An `Executor` (`cluster.RayExecutor`) runs each rollout with the settings the runner hands it and brings its folder
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from agentbake.errors import SandboxError
from agentbake.runner.runner_config import SCRIPTED, SCRIPTED_MODEL_NAME

if TYPE_CHECKING:
    from agentbake.runner.backend_registry import BackendConfig
    from agentbake.runner.model.gateways import RolloutGateways
    from agentbake.runner.result import RolloutResult
    from agentbake.runner.runner_config import RunnerConfig
    from agentbake.tasks import Task


@dataclass(frozen=True)
class NodeSettings:
    """What a node's own runner is built from: the run's settings with the model resolved, and the backend's config.

    The resolved model carries the upstream URL, the served name and the preflight's logprobs mode."""

    runner: RunnerConfig
    backend: BackendConfig


class Executor(Protocol):
    """Runs one rollout elsewhere, its files in `result.out_dir`, and fills in `result` from what it wrote.

    It writes the rollout's result.json unless aborted."""

    def run(self, task: Task, result: RolloutResult, settings: NodeSettings) -> RolloutResult: ...

    def abort(self) -> None:
        """Cut the rollouts in flight short (Ctrl-C, SIGTERM); they write no result.json."""
        ...


def node_settings(config: RunnerConfig, gateways: RolloutGateways, backend: BackendConfig) -> NodeSettings:
    """The settings a node runs a rollout with: the model as `gateways` resolved it here (no second preflight)."""
    scripted = config.model == SCRIPTED and not config.oracle
    if scripted and not gateways.upstreams:
        raise SandboxError("model 'scripted' needs Runner.start_scripted(tasks) before a rollout")
    update = {
        "model": _one_or_all(gateways.upstreams) or config.model,
        "model_name": gateways.model_name or (SCRIPTED_MODEL_NAME if scripted else None),
        "logprobs_mode": gateways.logprobs_mode,
        "preflight": False,
    }
    return NodeSettings(config.model_copy(update=update), backend)


def _one_or_all(urls: tuple[str, ...]) -> str | tuple[str, ...] | None:
    """`RunnerConfig.model` for these worker URLs: one as a string, several as a tuple, none as None."""
    return urls[0] if len(urls) == 1 else (urls or None)
