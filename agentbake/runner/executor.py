"""Where a `Runner`'s rollouts run when not in its own process: an `Executor` (`cluster.RayExecutor`: a Ray task
on a node with a Docker engine) runs each one with the settings the runner hands it and brings its folder back."""

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
    """What a node's own runner is built from: the run's settings with the model resolved (the upstream URL,
    the scripted one included, the served model's name, the logprobs mode the preflight found, no second
    preflight) and the backend's config (the node builds the backend)."""

    runner: RunnerConfig
    backend: BackendConfig


class Executor(Protocol):
    """Runs one rollout elsewhere: fills in `result` (made by the runner: id, task, image, agent, out_dir) from
    what the rollout wrote, its files in `result.out_dir`, and writes its result.json unless aborted."""

    def run(self, task: Task, result: RolloutResult, settings: NodeSettings) -> RolloutResult: ...

    def abort(self) -> None:
        """Cut the rollouts in flight short (Ctrl-C, SIGTERM); they write no result.json."""
        ...
