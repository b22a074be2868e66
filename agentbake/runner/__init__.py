"""The runner: task -> sandbox -> harness -> gateway -> trace -> result, the same on every backend.

from agentbake.runner import Runner, RunnerConfig, discover_tasks

with Runner(RunnerConfig(image="agentbake/claude-code:<hash12>", model="scripted")) as runner:
    runner.start_scripted(tasks := discover_tasks(["examples/tasks"]))
    for result in runner.run_batch(tasks, repeats=4, concurrency=4):
        result.reward, result.status, [r.completion_token_ids for r in result.trace]
"""

from agentbake.runner.backend_registry import BACKENDS, BackendConfig, make_backend
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.harness import Harness, HarnessOutcome, oracle_launch
from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.result import PHASES, BatchSummary, RolloutResult, Status, percentile, summarize_results
from agentbake.runner.runner import BatchProgress, Runner, new_rollout_id, run_rollout
from agentbake.runner.runner_config import SCRIPTED, RunnerConfig
from agentbake.runner.sandbox import BgJob, Capabilities, ExecResult, SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.tasks import Task, discover_tasks, load_task

__all__ = [
    "BACKENDS",
    "PHASES",
    "SCRIPTED",
    "BackendConfig",
    "BatchProgress",
    "BatchSummary",
    "BgJob",
    "Capabilities",
    "DockerBackend",
    "DockerConfig",
    "E2BBackend",
    "E2BConfig",
    "ExecResult",
    "HFBackend",
    "HFConfig",
    "Harness",
    "HarnessOutcome",
    "RolloutResult",
    "Runner",
    "RunnerConfig",
    "SandboxBackend",
    "SandboxHandle",
    "SandboxRequest",
    "Status",
    "Task",
    "discover_tasks",
    "load_task",
    "make_backend",
    "new_rollout_id",
    "oracle_launch",
    "percentile",
    "run_rollout",
    "summarize_results",
]
