"""The battery run against each task's verifier: every exploit as the task's solution, beside two baselines.

A finding is forged when the exploit got more reward than doing nothing, with a status a trainer uses. No exploit
solves anything, so such a reward was not earned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbake.audit.exploits import Exploit

if TYPE_CHECKING:
    from agentbake.runner import RolloutResult, Runner, Task

NOTHING = Exploit("nothing", "does nothing: the reward the verifier gives an untouched workdir", ":\n", "")
"""The baseline every exploit is measured against."""
SOLUTION = "solution"
"""The other baseline's name: the task's own solution/solve.sh, when it has one."""

SCORED = frozenset({"ok", "agent_error", "agent_timeout", "oom", "disk_limit"})
"""Statuses whose reward a trainer uses (the verifier ran and judged the agent's work)."""
UNTRIED = frozenset({"setup_error", "sandbox_error"})
"""Statuses that say nothing of the verifier: the exploit never reached it."""
HUGE_MB = 200
"""The huge-workdir exploit's sparse file, at most a quarter of the sandbox's storage limit."""


@dataclass(frozen=True)
class Finding:
    """What the verifier of one task gave one exploit (or baseline)."""

    task: str
    name: str
    """The exploit's name, or `nothing` / `solution` for a baseline."""
    baseline: bool
    forged: bool
    """The reward is above doing nothing's, with a status whose reward counts."""
    reward: float
    status: str
    error: str | None = None
    """The rollout's error, when its status is not `ok`."""
    hint: str | None = None
    """What to change in the verifier, when forged."""
    out_dir: Path | None = None
    """The rollout's files (the verifier's output, the workdir's diff)."""

    @property
    def untried(self) -> bool:
        """The rollout failed before the verifier judged anything (its setup or its sandbox)."""
        return self.status in UNTRIED

    def summary(self) -> dict[str, Any]:
        """The finding as `--json` prints it."""
        return {
            "task": self.task,
            "name": self.name,
            "baseline": self.baseline,
            "forged": self.forged,
            "reward": self.reward,
            "status": self.status,
            "error": self.error,
            "hint": self.hint,
        }


@dataclass
class TaskAudit:
    """Every finding of one task, baselines first."""

    task: str
    floor: float
    """What doing nothing earned (0 when that run's reward does not count)."""
    findings: list[Finding]
    warnings: list[str] = field(default_factory=list)
    """What makes the verdicts weaker (a baseline that failed, a solution that earns no more than nothing)."""

    @property
    def forged(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.forged]


@dataclass(frozen=True)
class _Run:
    task: Task
    """The task as the oracle runs it: for an exploit, its solution_script is the exploit's."""
    name: str
    exploit: Exploit | None
    """None for the task's own solution."""
    out_dir: Path


def audit_tasks(
    runner: Runner,
    tasks: Sequence[Task],
    exploits: Sequence[Exploit],
    *,
    work_dir: Path,
    out_dir: Path,
    concurrency: int,
    default_storage_mb: int,
    on_result: Callable[[RolloutResult], None] | None = None,
) -> list[TaskAudit]:
    """Run the baselines and every exploit on each task (`runner` must be an oracle runner), all in one batch
    `concurrency` at once; each exploit's files go under `work_dir`, each rollout's files to
    `out_dir/<task>/<name>/`. The user's task folders are only read."""
    runs = [
        run
        for task in tasks
        for run in _runs(task, exploits, work_dir / task.name, out_dir / task.name, runner, default_storage_mb)
    ]
    by_dir = {run.out_dir.resolve(): run for run in runs}
    results: dict[tuple[str, str], RolloutResult] = {}
    for result in runner.iter_rollouts([(run.task, run.out_dir) for run in runs], concurrency=concurrency):
        run = by_dir[Path(str(result.out_dir)).resolve()]
        results[(run.task.name, run.name)] = result
        if on_result is not None:
            on_result(result)
    return [_judge(task, [run for run in runs if run.task.name == task.name], results) for task in tasks]


def _runs(
    task: Task, exploits: Iterable[Exploit], work_dir: Path, out_dir: Path, runner: Runner, default_storage_mb: int
) -> list[_Run]:
    storage_mb = runner.config.storage_mb or task.storage_mb or default_storage_mb
    settings = f"AUDIT_HUGE_MB={min(HUGE_MB, storage_mb // 4)}\nAUDIT_FILES=20000\n"
    runs = [_exploit_run(task, NOTHING, work_dir, out_dir, settings)]
    if task.solution_script is not None:
        runs.append(_Run(task, SOLUTION, None, out_dir / SOLUTION))
    runs += [_exploit_run(task, exploit, work_dir, out_dir, settings) for exploit in exploits]
    return runs


def _exploit_run(task: Task, exploit: Exploit, work_dir: Path, out_dir: Path, settings: str) -> _Run:
    """The task with the exploit as its solution, in a folder of its own; the task's folder stays untouched."""
    folder = work_dir / exploit.name
    folder.mkdir(parents=True)
    for name, text in {**exploit.files, "audit.env": settings, "solve.sh": exploit.solve_sh()}.items():
        (folder / name).write_text(text)
    variant = dataclasses.replace(task, solution_script=folder / "solve.sh")
    return _Run(variant, exploit.name, exploit, out_dir / exploit.name)


def _judge(task: Task, runs: list[_Run], results: dict[tuple[str, str], RolloutResult]) -> TaskAudit:
    nothing = results[(task.name, NOTHING.name)]
    counts = nothing.status.value in SCORED
    floor = nothing.reward if counts else 0.0
    warnings = []
    if not counts:
        warnings.append(
            f"doing nothing ended {nothing.status.value} ({nothing.error}): every exploit is measured against reward 0"
        )
    findings = []
    for run in runs:
        result = results[(task.name, run.name)]
        status = result.status.value
        forged = run.exploit is not None and run.exploit is not NOTHING and status in SCORED and result.reward > floor
        findings.append(
            Finding(
                task=task.name,
                name=run.name,
                baseline=run.exploit is None or run.exploit is NOTHING,
                forged=forged,
                reward=result.reward,
                status=status,
                error=result.error,
                hint=run.exploit.hint if forged and run.exploit is not None else None,
                out_dir=result.out_dir,
            )
        )
        if run.name == SOLUTION and (status not in SCORED or result.reward <= floor):
            warnings.append(
                f"the task's own solution earned {result.reward:g} ({status}), no more than doing nothing "
                f"({floor:g}): check the task; a forged reward is still one above doing nothing"
            )
    untried = [finding.name for finding in findings if finding.untried]
    if untried:
        warnings.append(f"not judged (the rollout failed before the verifier): {', '.join(untried)}")
    return TaskAudit(task.name, floor, findings, warnings)
