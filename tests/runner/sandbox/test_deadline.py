"""The in-sandbox deadline as the Docker and E2B backends build it (no engine: the commands and results only;
tests/runner/docker/test_sandbox.py and tests/runner/remote/test_e2b.py run them)."""

from __future__ import annotations

import subprocess
import time

import pytest

from agentbake.runner.sandbox import ExecResult
from agentbake.runner.sandbox.deadline import (
    SIGKILL_EXIT,
    TIMEOUT_EXIT,
    deadline_argv,
    deadline_command,
    deadline_result,
)


def test_the_deadline_wraps_the_command_in_timeout_kill() -> None:
    assert deadline_argv(["sleep", "5"], None) == ["sleep", "5"]
    assert deadline_argv(["sleep", "5"], 1.5) == ["timeout", "-s", "KILL", "1.5", "sleep", "5"]
    assert deadline_command("echo 'a b'; exit 3", None) == "echo 'a b'; exit 3"
    assert deadline_command("echo 'a b'; exit 3", 30) == "timeout -s KILL 30 sh -c 'echo '\"'\"'a b'\"'\"'; exit 3'"


@pytest.mark.parametrize("timeout", [0, -1])
def test_a_timeout_that_is_not_positive_is_refused(timeout: float) -> None:
    with pytest.raises(ValueError, match=f"timeout must be > 0 seconds, got {timeout}"):
        deadline_argv(["true"], timeout)
    with pytest.raises(ValueError, match="timeout must be > 0 seconds"):
        deadline_command("true", timeout)


def test_a_command_killed_at_its_deadline_reads_as_exit_124() -> None:
    started = time.monotonic()
    done = subprocess.run(["sh", "-c", deadline_command("echo before; sleep 5", 0.3)], capture_output=True, text=True)
    assert done.returncode == SIGKILL_EXIT, done  # the outer shell saw its child killed
    killed = ExecResult(done.returncode, done.stdout, "")
    assert deadline_result(killed, 0.3, started) == ExecResult(TIMEOUT_EXIT, "before\n", "", timed_out=True)


def test_a_sigkill_before_the_deadline_or_without_one_stays_a_sigkill() -> None:
    killed = ExecResult(SIGKILL_EXIT, "", "")
    assert deadline_result(killed, 60, time.monotonic()) is killed
    assert deadline_result(killed, None, 0) is killed
    assert deadline_result(ExecResult(1, "", ""), 0.001, 0) == ExecResult(1, "", "")
