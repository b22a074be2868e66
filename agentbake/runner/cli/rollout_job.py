"""The job directory `agentbake rollout` runs into, from its options.

That is a new job (`--jobs-dir`/`--job-name`, default `jobs/<start time>`), or the one `--resume DIR` names. A resumed
job runs with its own settings, or checks them against the settings given in full.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from agentbake.runner.cli.backend_options import BackendChoice
from agentbake.runner.cli.ray_options import RAY_OPTIONS

if TYPE_CHECKING:
    from agentbake.runner.job import Job, JobConfig
    from agentbake.runner.runner_config import RunnerConfig
    from agentbake.tasks import Task


# What `--resume DIR` alone may set; every other setting comes from the job's config.json.
_RESUME_MAY_SET = ("resume_dir", "as_json", "n_concurrent", "warm", "relay_listen", "relay_url", *RAY_OPTIONS)


def open_rollout_job(
    image: str | None,
    make_config: Callable[..., RunnerConfig],
    task_dirs: tuple[Path, ...],
    n_attempts: int,
    n_concurrent: int,
    warm: int,
    jobs_dir: Path | None,
    job_name: str | None,
    resume_dir: Path | None,
    backend: BackendChoice,
) -> tuple[Job, list[Task]]:
    """The job to run, its settings and its tasks: a new job, or the one `--resume` names.

    A resumed job takes its own settings when no IMAGE is given, else checks them against those given."""
    from agentbake.runner.cli.display import warn
    from agentbake.runner.job import Job, JobConfig, JobTask
    from agentbake.tasks import discover_tasks

    if resume_dir is not None and (jobs_dir is not None or job_name is not None):
        raise click.UsageError("--resume DIR is the job's directory: drop --jobs-dir and --job-name")
    backend = dataclasses.replace(backend, warm=warm)
    if resume_dir is not None and image is None:
        job = Job.open(resume_dir)
        return Job(job.dir, _own_settings(job.config, resume_dir, backend)), job.load_tasks()
    if not task_dirs:
        raise click.UsageError("--path is required: a task directory or a folder of them (or --resume DIR)")
    tasks = discover_tasks(task_dirs)
    for task in tasks:
        warn(task.warnings)
    new_dir = (jobs_dir or Path("jobs")) / (job_name or time.strftime("%Y-%m-%d__%H-%M-%S"))
    directory = (resume_dir or new_dir).absolute()
    config = JobConfig(
        # A resume checks the tag first: a catalog changed since the job started is refused, not built.
        runner=make_config(gateway=backend.gateway, out_dir=directory, build_missing=resume_dir is None),
        backend=backend.job_backend(),
        tasks=tuple(JobTask.of(task) for task in tasks),
        n_attempts=n_attempts,
        n_concurrent=n_concurrent,
    )
    if resume_dir is None:
        return Job.start(directory, config), tasks
    job = Job.open(resume_dir)
    job.check(config)
    return Job(job.dir, config), tasks


def _own_settings(stored: JobConfig, resume_dir: Path, backend: BackendChoice) -> JobConfig:
    """A job resumed by `--resume DIR` alone: its own settings, plus the runtime ones given (-n, --warm, the relay's).

    Any other option given is refused, naming it."""
    from agentbake.runner.job import CONFIG_FILE

    ctx = click.get_current_context()
    given = {
        param.name: param
        for param in ctx.command.params
        if param.name and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
    }
    refused = [param.get_error_hint(ctx) for name, param in given.items() if name not in _RESUME_MAY_SET]
    if refused:
        raise click.UsageError(
            f"--resume without IMAGE takes every setting from {resume_dir / CONFIG_FILE}: drop {', '.join(refused)} "
            "(or repeat the job's whole command, IMAGE and --path included, with --resume to have them checked)"
        )
    update: dict[str, Any] = {
        "runner": stored.runner.model_copy(update={"out_dir": resume_dir.absolute()}),
        "backend": backend.with_runtime(stored.backend, given),
    }
    if "n_concurrent" in given:
        update["n_concurrent"] = ctx.params["n_concurrent"]
    return stored.model_copy(update=update)
