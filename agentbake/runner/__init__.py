"""The runner: task -> sandbox -> harness -> gateway -> trace -> result, the same on every backend.

from agentbake.runner import Runner, RunnerConfig, discover_tasks

with Runner(RunnerConfig(image="agentbake/claude-code:<hash12>", model="scripted")) as runner:
    runner.start_scripted(tasks := discover_tasks(["examples/tasks"]))
    for result in runner.run_batch(tasks, repeats=4, concurrency=4):
        result.reward, result.status, [r.completion_token_ids for r in result.trace]
"""

from agentbake.lazy import lazy_exports

# name -> the module defining it, imported on first use (agentbake/lazy.py)
_EXPORTS = {
    "BACKENDS": "agentbake.runner.backend_registry",
    "BackendConfig": "agentbake.runner.backend_registry",
    "make_backend": "agentbake.runner.backend_registry",
    "DockerBackend": "agentbake.runner.docker.backend",
    "DockerConfig": "agentbake.runner.docker.config",
    "Harness": "agentbake.runner.harness.steps",
    "HarnessOutcome": "agentbake.runner.harness.steps",
    "oracle_launch": "agentbake.runner.harness.steps",
    "E2BBackend": "agentbake.runner.remote.e2b",
    "E2BConfig": "agentbake.runner.remote.e2b_config",
    "HFBackend": "agentbake.runner.remote.hf",
    "HFConfig": "agentbake.runner.remote.hf_config",
    "BatchSummary": "agentbake.runner.result",
    "PHASES": "agentbake.runner.result",
    "RolloutResult": "agentbake.runner.result",
    "Status": "agentbake.runner.result",
    "percentile": "agentbake.runner.result",
    "summarize_results": "agentbake.runner.result",
    "BatchProgress": "agentbake.runner.batch",
    "RayConfig": "agentbake.runner.cluster.ray_config",
    "RayExecutor": "agentbake.runner.cluster.ray_executor",
    "Executor": "agentbake.runner.executor",
    "NodeSettings": "agentbake.runner.executor",
    "Runner": "agentbake.runner.runner",
    "new_rollout_id": "agentbake.runner.rollout",
    "run_rollout": "agentbake.runner.runner",
    "RunnerConfig": "agentbake.runner.runner_config",
    "SCRIPTED": "agentbake.runner.runner_config",
    "BgJob": "agentbake.runner.sandbox",
    "Capabilities": "agentbake.runner.sandbox",
    "ExecResult": "agentbake.runner.sandbox",
    "SandboxBackend": "agentbake.runner.sandbox",
    "SandboxHandle": "agentbake.runner.sandbox",
    "SandboxRequest": "agentbake.runner.sandbox",
    "Task": "agentbake.tasks",
    "discover_tasks": "agentbake.tasks",
    "load_task": "agentbake.tasks",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
