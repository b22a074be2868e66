"""Runner commands: `agentbake run` (one rollout), `agentbake rollout` (a batch with live progress and a
summary table) and `agentbake gc`."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from agentbake.clikit import RenamedOptions, print_json, tasks_option
from agentbake.errors import AgentbakeError
from agentbake.runner.cli.backend_options import BackendChoice, backend_options
from agentbake.runner.cli.ray_options import RayChoice, ray_options
from agentbake.runner.cli.rollout_job import open_rollout_job
from agentbake.runner.cli.run_options import RENAMED, run_options

# What a command needs only once it runs (the engine's SDK, rich, the runner, pydantic models) is imported in
# its body: `agentbake run --help` imports click and the option definitions (no pydantic), nothing else.
if TYPE_CHECKING:
    from agentbake.runner.docker.gc import Leftover
    from agentbake.runner.runner import Runner
    from agentbake.runner.runner_config import RunnerConfig
    from agentbake.tasks import Task


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option(
    "--runtime-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Host folder of the sandboxes' folders (default: DockerConfig's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: dry_run and the leftovers.")
def gc_command(dry_run: bool, runtime_dir: Path | None, as_json: bool) -> None:
    """Remove sandboxes (containers, networks, host folders) that are expired or whose runner is gone."""
    from agentbake.buildkit.engine import connect
    from agentbake.runner.docker.gc import collect

    leftovers = collect(connect(timeout=60).api, dry_run=dry_run, runtime_dir=runtime_dir)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "leftovers": [dataclasses.asdict(x) for x in leftovers]}))
    else:
        _report(leftovers, dry_run)
    if any(item.error for item in leftovers):
        raise click.exceptions.Exit(1)


def _report(leftovers: list[Leftover], dry_run: bool) -> None:
    from rich.markup import escape

    from agentbake.runner.cli.display import err

    verb = "would remove" if dry_run else "removed"
    for item in leftovers:
        state = verb if item.removed or dry_run else f"[red]failed[/] ({escape(item.error or '')})"
        err().print(f"{state} {item.kind} {escape(item.name)} (rollout {escape(item.rollout or '-')}, {item.reason})")
    if not leftovers:
        err().print("nothing to remove")


@click.command("run", cls=RenamedOptions, renamed={**RENAMED, "--task": "--path", "--out": "--rollouts-dir"})
@run_options()
@backend_options
@click.option(
    "-p",
    "--path",
    "task_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The task's directory (Harbor layout).",
)
@click.option(
    "-o",
    "--rollouts-dir",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="The rollout writes ROLLOUTS_DIR/<rollout_id>/.",
)
def run_command(
    image: str | None,
    make_config: Callable[..., RunnerConfig],
    as_json: bool,
    task_dir: Path,
    out_dir: Path,
    backend: BackendChoice,
) -> None:
    """Run one rollout of IMAGE (a catalog name, built when missing, or a tag) on one task.

    Exits 1 when the status is not `ok` (the reward alone never fails the command)."""
    from agentbake.runner.cli.display import build_progress, err, print_result, warn
    from agentbake.runner.cli.teardown import teardown_on_signals
    from agentbake.runner.runner import Runner
    from agentbake.runner.runner_config import SCRIPTED
    from agentbake.tasks import load_task

    task = load_task(task_dir)
    warn(task.warnings)
    config = make_config(gateway=backend.gateway, out_dir=out_dir)
    with teardown_on_signals(runner := Runner(config, backend.config(), build_progress=build_progress)):
        if config.model == SCRIPTED:
            runner.start_scripted([task])
        try:
            _prepare_images(runner, [task])
            result = runner.run(task)
        except KeyboardInterrupt:
            err().print("[yellow]interrupted:[/] removed the rollout's sandbox and gateway")
            sys.exit(130)
    if as_json:
        print_json(result.summary())
    else:
        print_result(result)
    if not result.ok:
        sys.exit(1)


def _old_out(value: str) -> list[str]:
    """`rollout --out DIR`, the job directory's old spelling, as `--jobs-dir` and `--job-name`."""
    path = Path(value)
    return ["--jobs-dir", str(path.parent), "--job-name", path.name]


@click.command("rollout", cls=RenamedOptions, renamed={**RENAMED, "--tasks": "--path", "--out": _old_out})
@run_options()
@backend_options
@ray_options
@tasks_option("A task directory or a folder of them; repeat for more.", required=False)
@click.option(
    "-k",
    "--n-attempts",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rollouts per task (Harbor's -k).",
)
@click.option(
    "-n",
    "--n-concurrent",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rollouts at once (Harbor's -n).",
)
@click.option("--warm", default=0, show_default=True, type=click.IntRange(min=0), help="Sandboxes kept started.")
@click.option(
    "-o",
    "--jobs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The folder of jobs: the job writes JOBS_DIR/JOB_NAME/ (config.json, <task>__<attempt>/ per rollout, "
    "summary.json) [default: jobs].",
)
@click.option("--job-name", help="The job's folder in JOBS_DIR, new or empty [default: its start time].")
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Continue the job in this directory, running only the rollouts without a result. Alone it takes every "
    "setting from DIR/config.json; with IMAGE, --path and the rest they must be the job's own (-n, --warm and "
    "the relay's may differ).",
)
def rollout_command(
    image: str | None,
    make_config: Callable[..., RunnerConfig],
    as_json: bool,
    task_dirs: tuple[Path, ...],
    n_attempts: int,
    n_concurrent: int,
    warm: int,
    jobs_dir: Path | None,
    job_name: str | None,
    resume_dir: Path | None,
    backend: BackendChoice,
    ray: RayChoice,
) -> None:
    """Run every task N_ATTEMPTS times on IMAGE, N_CONCURRENT at once, into JOBS_DIR/JOB_NAME, with live
    progress, then print a summary table. `--resume DIR` continues an interrupted job."""
    from agentbake.runner.cli.display import BatchDisplay, build_progress, err, print_summary
    from agentbake.runner.cli.teardown import teardown_on_signals
    from agentbake.runner.job import SUMMARY_FILE
    from agentbake.runner.runner import Runner
    from agentbake.runner.runner_config import SCRIPTED

    ray.check(backend.name, warm)
    job, tasks = open_rollout_job(
        image, make_config, task_dirs, n_attempts, n_concurrent, warm, jobs_dir, job_name, resume_dir, backend
    )
    config = job.config
    pending = job.pending(tasks)
    if resume_dir is not None:
        finished = len(job.rollouts()) - len(pending)
        err().print(f"resuming {job.dir}: {finished} rollouts finished, {len(pending)} to run")
    if pending:
        display = BatchDisplay(len(pending))
        backend_config = config.backend.config
        executor = ray.executor(config.backend.name, getattr(config.backend.config, "warm", 0))
        runner = Runner(config.runner, backend_config, build_progress=build_progress, executor=executor)
        with teardown_on_signals(runner, *([executor] if executor else [])):
            if config.runner.model == SCRIPTED:
                runner.start_scripted(tasks)
            try:
                _prepare_images(runner, tasks)
                with display:
                    for _ in runner.iter_rollouts(pending, concurrency=config.n_concurrent, on_progress=display.update):
                        pass
            except KeyboardInterrupt:
                err().print(
                    "[yellow]interrupted:[/] removed the batch's sandboxes and gateways; the finished rollouts are "
                    f"kept and `agentbake rollout --resume {job.dir}` runs the others"
                )
                sys.exit(130)
            finally:
                job.write_summary()  # also when interrupted (SIGTERM, Ctrl-C): what finished so far
    summary = job.write_summary()
    report = _write_report(job.dir)
    results = [result for _, _, result in job.results()]
    if as_json:
        for result in results:
            print_json(result.summary())
        print_json(
            {"summary": summary["summary"], "job": str(job.dir), "complete": summary["complete"], "report": report}
        )
    else:
        print_summary(results)
        err().print(
            f"job {job.dir}: {summary['finished']}/{summary['total']} rollouts finished; totals in {SUMMARY_FILE}"
        )
        if report:
            err().print(f"report: {report} (open it in a browser)", soft_wrap=True)


def _write_report(directory: Path) -> str | None:
    """Write the job's report.html and return its path.

    A failure is a warning saying how to write it later, since the job itself finished."""
    from agentbake.report.render import REPORT_FILE, write_report

    try:
        return str(write_report([directory], directory / REPORT_FILE))
    except AgentbakeError as exc:
        from rich.markup import escape

        from agentbake.runner.cli.display import err

        err().print(f"[yellow]warning:[/] no report: {escape(str(exc))}; `agentbake report {directory}` retries")
        return None


def _prepare_images(runner: Runner, tasks: list[Task]) -> None:
    """Build what the tasks' own images lack before the first rollout, with progress. A task whose image
    cannot be had is reported here; its rollouts then end as `sandbox_error` with the same message."""
    if runner.executor is not None:
        return  # each node builds them, by its first rollout of the task
    for task in tasks:
        if task.has_own_image and runner.backend.capabilities.task_images:
            try:
                runner.images.resolve(task)
            except AgentbakeError as exc:
                from rich.markup import escape  # rich only when there is something to print

                from agentbake.runner.cli.display import err

                err().print(f"[red]error:[/] {escape(str(exc))}")
