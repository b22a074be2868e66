"""`agentbake audit TASK...`: the exploit battery against each task's verifier, and what forged a reward.

Exit status: 0 nothing forged, 1 something did, 2 bad input, 3 some runs never reached the verifier.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from agentbake.audit.exploits import BY_NAME, EXPLOITS
from agentbake.clikit import RenamedOptions, json_option, print_json

# rich, the runner and the engine's SDK are imported once the command runs: `audit --help` needs none of them.
if TYPE_CHECKING:
    from rich.console import Console

    from agentbake.audit.audit import TaskAudit
    from agentbake.audit.exploits import Exploit
    from agentbake.buildkit.progress import ConsoleProgress
    from agentbake.runner import RolloutResult, Task

EXIT_FORGED = 1
EXIT_BAD_INPUT = 2
EXIT_UNTRIED = 3


@functools.cache
def err() -> Console:
    """The console on stderr (stdout holds the table or the `--json` lines), made on first use."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


@click.command("audit", cls=RenamedOptions, renamed={"--out": "--rollouts-dir", "--image": "--agent"})
@click.argument("task_dirs", metavar="TASK...", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-a",
    "--agent",
    "image",
    metavar="IMAGE",
    default="claude-code",
    show_default=True,
    help="The agent image whose harness runs the rollouts (a catalog name, built when missing, or a tag); a task "
    "with its own image (environment/Dockerfile, docker_image) runs in that image. No model is used.",
)
@click.option(
    "-n", "--n-concurrent", default=4, show_default=True, type=click.IntRange(min=1), help="Rollouts at once."
)
@click.option(
    "--exploit",
    "names",
    multiple=True,
    type=click.Choice(list(BY_NAME)),
    help="Run only this exploit (repeat for more); default: the whole battery.",
)
@click.option(
    "-o",
    "--rollouts-dir",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep each rollout's files in ROLLOUTS_DIR/<task>/<exploit>/ (a new or empty folder) [default: a "
    "temporary folder, removed].",
)
@json_option
def audit_command(
    task_dirs: tuple[Path, ...],
    image: str,
    n_concurrent: int,
    names: tuple[str, ...],
    out_dir: Path | None,
    as_json: bool,
) -> None:
    """Run generic exploits against each TASK's verifier and report which got a reward they did not earn.

    Each exploit is the task's solution in turn, with no model; doing nothing and the real solution are the
    baselines. Exits 1 when an exploit forged a reward, 0 when none did (those exploits fail; the verifier may still
    be unsound), 2 on bad input, 3 when some runs never reached the verifier."""
    from agentbake.errors import TaskError
    from agentbake.runner import discover_tasks

    try:
        tasks = discover_tasks(task_dirs)
    except TaskError as exc:
        _bad_input(str(exc))
    if out_dir is not None and out_dir.exists() and any(out_dir.iterdir()):
        _bad_input(f"--rollouts-dir {out_dir}: not empty; give a new or empty folder")
    exploits = [BY_NAME[name] for name in dict.fromkeys(names)] if names else list(EXPLOITS)
    with tempfile.TemporaryDirectory(prefix="agentbake-audit-") as scratch:
        audits = _run(tasks, exploits, image, n_concurrent, out_dir or Path(scratch) / "out", Path(scratch))
    if as_json:
        for task_audit in audits:
            for finding in task_audit.findings:
                print_json(finding.summary())
    else:
        _print_report(audits, len(exploits), kept=out_dir)
    for task_audit in audits:
        for warning in task_audit.warnings:
            err().print(f"[yellow]warning:[/] {task_audit.task}: {warning}", markup=True)
    if any(task_audit.forged for task_audit in audits):
        sys.exit(EXIT_FORGED)
    if any(finding.untried for task_audit in audits for finding in task_audit.findings):
        sys.exit(EXIT_UNTRIED)


def _bad_input(message: str) -> NoReturn:
    from rich.markup import escape

    err().print(f"[red]error:[/] {escape(message)}")
    sys.exit(EXIT_BAD_INPUT)


def _run(
    tasks: list[Task], exploits: list[Exploit], image: str, concurrency: int, out_dir: Path, scratch: Path
) -> list[TaskAudit]:
    from agentbake.audit.audit import audit_tasks
    from agentbake.errors import AgentbakeError
    from agentbake.runner import DockerConfig, Runner, RunnerConfig
    from agentbake.runner.cli.teardown import teardown_on_signals
    from agentbake.runner.images import resolve_image

    config = RunnerConfig(image=resolve_image(image), oracle=True, out_dir=out_dir)
    backend = DockerConfig()
    display = _Progress(len(tasks) * (len(exploits) + 1) + sum(task.solution_script is not None for task in tasks))
    with teardown_on_signals(runner := Runner(config, backend, build_progress=_build_progress)):
        for task in tasks:  # what the tasks' own images lack, built once with progress before the batch
            if task.has_own_image:
                try:
                    runner.images.resolve(task)
                except AgentbakeError as exc:
                    from rich.markup import escape

                    err().print(f"[red]error:[/] {escape(str(exc))}")
        try:
            return audit_tasks(
                runner,
                tasks,
                exploits,
                work_dir=scratch / "exploits",
                out_dir=out_dir,
                concurrency=concurrency,
                default_storage_mb=backend.storage_mb,
                on_result=display.update,
            )
        except KeyboardInterrupt:
            err().print("[yellow]interrupted:[/] removed the audit's sandboxes")
            sys.exit(130)


def _build_progress(what: str) -> ConsoleProgress:
    from agentbake.buildkit.progress import ConsoleProgress

    err().print(f"building {what} (missing on this engine)")
    return ConsoleProgress(what, err())


class _Progress:
    """Rollouts done out of the total on stderr; a line per rollout when stderr is not a terminal."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0

    def update(self, result: RolloutResult) -> None:
        self.done += 1
        where = "" if result.out_dir is None else f"{result.out_dir.parent.name}/{result.out_dir.name}"
        err().print(f"[{self.done}/{self.total}] {where}: {result.status.value} reward {result.reward:g}", markup=False)


def _print_report(audits: list[TaskAudit], exploits: int, *, kept: Path | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table("task", "exploit", "forged", "reward", "status", title="agentbake audit")
    for task_audit in audits:
        for finding in task_audit.findings:
            verdict = "baseline" if finding.baseline else "[bold red]FORGED[/]" if finding.forged else "[green]no[/]"
            status = finding.status if finding.status == "ok" else f"[yellow]{finding.status}[/]"
            table.add_row(escape(finding.task), finding.name, verdict, f"{finding.reward:g}", status)
        table.add_section()
    console = Console()
    console.print(table)
    forged = [finding for task_audit in audits for finding in task_audit.forged]
    for finding in forged:
        console.print(f"[bold red]forged[/] {escape(finding.task)} / {finding.name}: {escape(finding.hint or '')}")
    if forged:
        tasks = len({finding.task for finding in forged})
        console.print(f"{len(forged)} forged rewards in {tasks} of {len(audits)} tasks")
    else:
        console.print(
            f"no exploit forged a reward: none of these {exploits} works on these {len(audits)} tasks, which does not "
            "prove a verifier sound"
        )
    if kept is not None:
        console.print(f"each rollout's files: {escape(str(kept))}/<task>/<exploit>/")
