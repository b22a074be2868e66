"""How a rollout's steps ended (`HarnessOutcome`), and an exception as a result's message."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentbake.errors import AgentbakeError
from agentbake.runner.result import Status


@dataclass
class HarnessOutcome:
    """What the steps produced; the rollout turns it into a `RolloutResult`."""

    status: Status = Status.OK
    reward: float = 0.0
    exit_code: int | None = None
    verifier_exit_code: int | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    """What was cut or left out with the status unchanged (copy-out caps, links not followed)."""

    def fail(self, status: Status, error: str, *, decisive: bool = False) -> None:
        """Record a failure; the first one is the status, later ones are appended to the message. A
        `decisive` one (the rollout can no longer be judged) is the status whatever came before."""
        if self.status is Status.OK:
            self.status, self.error = status, error
        elif decisive:
            self.status, self.error = status, f"{error}; before that, {self.error}"
        else:
            self.error = f"{self.error}; then {error}"


def describe_error(exc: BaseException) -> str:
    """An exception as a result's message: agentbake's own errors say what went wrong, others name their type."""
    return str(exc) if isinstance(exc, AgentbakeError) else f"{type(exc).__name__}: {exc}"
