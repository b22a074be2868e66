"""The runner: task -> sandbox -> harness -> gateway -> trace -> result, the same on every backend."""

from agentbake.runner.docker import DockerBackend
from agentbake.runner.docker_config import DockerConfig
from agentbake.runner.sandbox import BgJob, ExecResult, SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.runner.task import Task, discover_tasks, load_task

__all__ = [
    "BgJob",
    "DockerBackend",
    "DockerConfig",
    "ExecResult",
    "SandboxBackend",
    "SandboxHandle",
    "SandboxRequest",
    "Task",
    "discover_tasks",
    "load_task",
]
