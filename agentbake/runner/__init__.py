"""The runner: task -> sandbox -> harness -> gateway -> trace -> result, the same on every backend."""

from agentbake.runner.sandbox import BgJob, ExecResult, SandboxBackend, SandboxHandle, SandboxRequest

__all__ = ["BgJob", "ExecResult", "SandboxBackend", "SandboxHandle", "SandboxRequest"]
