"""A command's deadline, kept inside the sandbox by `timeout -s KILL`, so it holds if the connection is lost.

Every backend that runs commands through a shell it does not control uses these: exit 124, `timed_out`.
"""

from __future__ import annotations

import shlex
import time

from agentbake.runner.sandbox.protocol import ExecResult

TIMEOUT_EXIT = 124
"""Exit code of a command stopped at its deadline (coreutils `timeout`'s convention)."""
SIGKILL_EXIT = 137
"""Exit code of a command ended by SIGKILL (128 + 9), which is what `timeout -s KILL` leaves."""


def require_positive(timeout: float | None) -> None:
    """A timeout is None (no deadline) or a positive number of seconds."""
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")


def deadline_argv(argv: list[str], timeout: float | None) -> list[str]:
    """`argv` under `timeout -s KILL <timeout>` (unchanged without a timeout)."""
    require_positive(timeout)
    return argv if timeout is None else ["timeout", "-s", "KILL", f"{timeout:g}", *argv]


def deadline_command(command: str, timeout: float | None) -> str:
    """A shell command under `timeout -s KILL <timeout> sh -c` (unchanged without a timeout)."""
    return command if timeout is None else shlex.join(deadline_argv(["sh", "-c", command], timeout))


def deadline_result(result: ExecResult, timeout: float | None, started: float) -> ExecResult:
    """A SIGKILL at or after the deadline (`started` by `time.monotonic()`) is the deadline: exit 124,
    `timed_out`. (`timeout -s KILL` kills its own process group too, so a deadline shows as SIGKILL.)"""
    if timeout is not None and result.exit_code == SIGKILL_EXIT and time.monotonic() - started >= timeout:
        return ExecResult(TIMEOUT_EXIT, result.stdout, result.stderr, timed_out=True)
    return result
