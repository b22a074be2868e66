"""The sandbox protocol every backend implements (`protocol.py`); the harness talks only to it."""

from agentbake.runner.sandbox.protocol import (
    BgJob,
    Capabilities,
    ExecResult,
    SandboxBackend,
    SandboxHandle,
    SandboxRequest,
)

__all__ = ["BgJob", "Capabilities", "ExecResult", "SandboxBackend", "SandboxHandle", "SandboxRequest"]
