"""Where a `Runner`'s rollouts run when not in its own process.

An `Executor` (`cluster.RayExecutor`) runs each rollout with the settings the runner hands it and brings its folder
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentbake.runner.backend_registry import BackendConfig
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
