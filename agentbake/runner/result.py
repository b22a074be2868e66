"""What one rollout hands back: status (what happened), reward (what the verifier said), timings, trace."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbake.errors import JobError
from agentbake.gateway.trace import TraceRecord

RESULT_FILE = "result.json"


class Status(enum.StrEnum):
    """How a rollout ended, separate from its reward. Only `ok` means nothing went wrong."""

    OK = "ok"
    AGENT_ERROR = "agent_error"
    """The agent exited non-zero; the verifier still ran."""
    AGENT_TIMEOUT = "agent_timeout"
    """The agent ran past the task's `[agent] timeout_sec` and was stopped; the verifier still ran."""
    OOM = "oom"
    """The kernel killed a process of the sandbox for memory; the verifier still ran."""
    DISK_LIMIT = "disk_limit"
    """The sandbox's files grew past its storage limit (`[environment] storage_mb`, else the runner's default)
    while the agent ran; the agent was stopped, the verifier still ran."""
    SETUP_ERROR = "setup_error"
    """`environment/setup.sh` failed or timed out; the agent never started."""
    VERIFIER_ERROR = "verifier_error"
    """The verifier could not run, must not (the agent changed its toolchain: harness README), wrote no reward or an
    unreadable one (one that wrote 0 is `ok`, reward 0)."""
    VERIFIER_TIMEOUT = "verifier_timeout"
    """`tests/test.sh` ran past `[verifier] timeout_sec`."""
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox could not be created or stopped answering, or the rollout was cancelled (`Runner.cancel`)."""
    MODEL_ERROR = "model_error"
    """The model worker the rollout was pinned to stopped answering (or none was left to take it); the rollout
    ended there rather than moving to another worker mid-conversation."""
    NODE_LOST = "node_lost"
    """The cluster node running the rollout was lost (`--ray`: it died, or none was left to run it); nothing of the
    rollout came back. The only status a job's `--resume` runs again."""


# Phases in the order they run (`image`: resolving the task's image, a build only for a task image's first
# rollout; `create` includes starting the rollout's gateway); `ready` is the span from the rollout's start to
# the agent running, the setup cost of a rollout.
PHASES = ("image", "create", "upload", "setup", "agent", "stop", "verifier", "collect", "teardown")


class Timings:
    """Seconds per phase, measured with a monotonic clock."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._origin = time.monotonic()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - started, 4)

    def mark(self, name: str) -> None:
        """Record seconds since the timings began (e.g. `ready`: the agent is running)."""
        self.seconds[name] = round(time.monotonic() - self._origin, 4)

    def finish(self) -> dict[str, float]:
        self.seconds["total"] = round(time.monotonic() - self._origin, 4)
        return dict(self.seconds)


@dataclass
class RolloutResult:
    """One rollout: the reward, how it ended, where its files are, and the model calls it made."""

    rollout_id: str
    """Unique id; the name of its folder under `out/` and the gateway's `rollout_id` in trace records."""
    task: str
    """The task's directory name."""
    status: Status
    reward: float
    """From the verifier: `/logs/verifier/reward.json`'s `reward`, else `reward.txt`; 0.0 when it wrote neither
    (then the status is `verifier_error`)."""
    image: str
    """The image reference the sandbox ran (a task with its own image: its runnable image)."""
    agent: str
    """The agent's name (`claude-code`, `opencode`, `pi`), or `oracle` when the reference solution ran."""
    agent_version: str | None = None
    """The agent CLI's version from the image's labels."""
    node: str | None = None
    """The cluster node that ran the rollout (`--ray`: its `node:<label>` resource, else `<address>/<id>`); None
    when it ran on this machine."""
    task_image: str | None = None
    """The task's own image (its Dockerfile's build or its docker_image), the agent layered on at run time."""
    exit_code: int | None = None
    """The agent's exit status (None when it never ran or was stopped at its timeout)."""
    verifier_exit_code: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase (see `PHASES`), `ready` (rollout start -> agent running) and `total`."""
    turns: int = 0
    """Model calls recorded by the rollout's gateway."""
    tokens: int = 0
    """Completion token ids captured over all calls."""
    calls_without_token_ids: int = 0
    """Successful model calls whose completion token ids were not captured (0 is what a trainer needs)."""
    trainable: bool | None = None
    """Whether the training export (`sequences.json`) passed its gate; None when nothing was recorded."""
    error: str | None = None
    """What went wrong, when the status is not `ok`."""
    notes: list[str] = field(default_factory=list)
    """What was cut or left out while the status stayed: a log cut at the caps, a link not followed, a path not
    collected."""
    worker: str | None = None
    """The model worker the rollout's calls all went to (its URL without credentials); None with no model."""
    out_dir: Path | None = None
    """The folder holding result.json, trace.jsonl, the agent's log, the verifier's output,
    workdir.diff and sequences.json."""
    trace: list[TraceRecord] = field(default_factory=list, repr=False)
    """The rollout's model calls, typed: token ids and logprobs for the trainer (not in result.json)."""

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def summary(self) -> dict[str, Any]:
        """The JSON object `agentbake run --json` prints and `result.json` holds."""
        return {
            "rollout_id": self.rollout_id,
            "task": self.task,
            "status": self.status.value,
            "reward": self.reward,
            "exit_code": self.exit_code,
            "verifier_exit_code": self.verifier_exit_code,
            "image": self.image,
            "task_image": self.task_image,
            "agent": self.agent,
            "agent_version": self.agent_version,
            "node": self.node,
            "timings": self.timings,
            "turns": self.turns,
            "tokens": self.tokens,
            "calls_without_token_ids": self.calls_without_token_ids,
            "trainable": self.trainable,
            "error": self.error,
            "worker": self.worker,
            "notes": self.notes,
            "out_dir": str(self.out_dir) if self.out_dir else None,
        }

    def write(self) -> None:
        """Write `result.json` into `out_dir` (sorted keys, so equal results give equal files). Written whole
        or not at all (a temporary file renamed over it): its presence means the rollout finished."""
        if self.out_dir is not None:
            text = json.dumps(self.summary(), indent=2, sort_keys=True) + "\n"
            partial = self.out_dir / f".{RESULT_FILE}.partial"
            partial.write_text(text)
            partial.replace(self.out_dir / RESULT_FILE)

    @classmethod
    def read(cls, folder: Path) -> RolloutResult:
        """The result a finished rollout wrote into `folder` (its `result.json`), without the trace."""
        path = folder / RESULT_FILE
        try:
            data = json.loads(path.read_text())
            known = {f.name for f in dataclasses.fields(cls)} - {"trace"}
            values = {key: value for key, value in data.items() if key in known}
            values["status"] = Status(values["status"])
            values["out_dir"] = Path(values["out_dir"]) if values.get("out_dir") else None
            return cls(**values)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise JobError(
                f"{path}: not a rollout's result ({exc}); remove {folder} to run that rollout again"
            ) from None


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..100) of `values`, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class BatchSummary:
    """Totals over a batch, as `agentbake rollout` prints them."""

    rollouts: int
    reward_mean: float | None
    statuses: dict[str, int]
    turns: int
    tokens: int
    calls_without_token_ids: int
    phases: dict[str, dict[str, float | None]]
    """Phase (and `ready`, `total`) -> {"p50": s, "p95": s}."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def summarize_results(results: list[RolloutResult]) -> BatchSummary:
    statuses: dict[str, int] = {}
    for result in results:
        statuses[result.status.value] = statuses.get(result.status.value, 0) + 1
    phases: dict[str, dict[str, float | None]] = {}
    for name in (*PHASES, "ready", "total"):
        values = [r.timings[name] for r in results if name in r.timings]
        if values:
            phases[name] = {"p50": percentile(values, 50), "p95": percentile(values, 95)}
    return BatchSummary(
        rollouts=len(results),
        reward_mean=sum(r.reward for r in results) / len(results) if results else None,
        statuses=dict(sorted(statuses.items())),
        turns=sum(r.turns for r in results),
        tokens=sum(r.tokens for r in results),
        calls_without_token_ids=sum(r.calls_without_token_ids for r in results),
        phases=phases,
    )
