"""The sandbox protocol every backend implements (`protocol.py`); the harness talks only to it."""

from agentbake.runner.sandbox.protocol import BgJob, ExecResult, SandboxBackend, SandboxHandle, SandboxRequest

__all__ = ["BgJob", "ExecResult", "SandboxBackend", "SandboxHandle", "SandboxRequest"]
