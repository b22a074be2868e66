"""Runner commands: `agentbake run` (one rollout), `agentbake rollout` (a batch with live progress and a
summary table) and `agentbake gc`."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from agentbake.clikit import json_option, model_options, print_json, tasks_option
from agentbake.errors import AgentbakeError
from agentbake.gateway.config import LOGPROBS_MODES, ModelSettings
from agentbake.runner.backend_options import BackendChoice, backend_options

# What a command needs only once it runs (the engine's SDK, rich, the runner, pydantic models) is imported in
# its body: `agentbake run --help` imports click, pydantic and the option definitions, nothing else.
if TYPE_CHECKING:
    from agentbake.buildkit.progress import ConsoleProgress
    from agentbake.runner.docker.gc import Leftover
    from agentbake.runner.job import Job, JobConfig
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

    from agentbake.runner.display import err

    verb = "would remove" if dry_run else "removed"
    for item in leftovers:
        state = verb if item.removed or dry_run else f"[red]failed[/] ({escape(item.error or '')})"
        err.print(f"{state} {item.kind} {escape(item.name)} (rollout {escape(item.rollout or '-')}, {item.reason})")
    if not leftovers:
        err.print("nothing to remove")


MODEL_REQUIRED = (
    "--model is required for an agent run: 'scripted' (the built-in model that plays each task's "
    "solution/solve.sh) or the base URL of an OpenAI-compatible server with its /v1; or --oracle (no model)"
)


def _model_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options `run` and `rollout` share: image resolution, model, key, preflight and logprobs modes,
    the gateway's model settings, `--json`. The command receives `image`, `as_json` and `make_config`, which
    builds the RunnerConfig from them and the command's own fields (out_dir, warm, gateway), resolving the
    image; a setting RunnerConfig refuses is a usage error."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def wrapper(
            *args: Any,
            image: str | None,
            agent: str | None,
            model: str | None,
            model_name: str | None,
            api_key_env: str,
            oracle: bool,
            no_preflight: bool,
            logprobs_mode: str | None,
            expect_logprobs: str,
            verifier_network: str,
            **kwargs: Any,
        ) -> Any:
            settings = {name: kwargs.pop(name) for name in ModelSettings.model_fields}
            if image is not None and agent is not None and image != agent:
                raise click.UsageError(f"IMAGE {image!r} and --agent {agent!r} name two agents: give one of them")
            image = image or agent

            def make_config(*, build_missing: bool = True, **extra: Any) -> RunnerConfig:
                from pydantic import ValidationError

                from agentbake.runner.runner_config import RunnerConfig

                if image is None:
                    raise click.UsageError(
                        "IMAGE (or --agent) is required: a catalog name (e.g. claude-code) or an image tag"
                    )
                if oracle and model is not None:
                    raise click.UsageError("--oracle runs the task's reference solution with no model: drop --model")
                if not oracle and model is None:
                    raise click.UsageError(MODEL_REQUIRED)
                try:
                    return RunnerConfig(
                        image=resolve_image(image, build_missing=build_missing),
                        model=model,
                        model_name=model_name,
                        api_key_env=api_key_env,
                        oracle=oracle,
                        preflight=not no_preflight,
                        logprobs_mode=logprobs_mode,
                        expect_logprobs=expect_logprobs,
                        verifier_network=verifier_network,
                        model_settings=ModelSettings(**settings),
                        **extra,
                    )
                except ValidationError as exc:
                    problems = "; ".join(
                        f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors()
                    )
                    raise click.UsageError(problems) from None

            return command(*args, image=image, make_config=make_config, **kwargs)

        # The gateway's model settings (--inner-system-as-user, --disable-thinking, --temperature, ...), from
        # ModelSettings' fields as `agentbake gateway` has them.
        decorated: Callable[..., Any] = model_options(ModelSettings)(wrapper)
        for option in reversed(
            [
                click.argument("image", required=False),
                click.option(
                    "--agent",
                    metavar="NAME",
                    help="The agent (claude-code, opencode, pi, or an image tag), as IMAGE names it: a task with its "
                    "own image (environment/Dockerfile, docker_image) runs in that image with this agent layered on.",
                ),
                click.option(
                    "--model",
                    help="Required for an agent run: 'scripted' (the built-in model that plays each task's "
                    "solution/solve.sh) or the base URL of an OpenAI-compatible server, with its /v1.",
                ),
                click.option("--model-name", help="Model name sent upstream and configured in the agent."),
                click.option(
                    "--api-key-env",
                    default="AGENTBAKE_UPSTREAM_API_KEY",
                    show_default=True,
                    help="Variable holding the upstream API key (e.g. OPENAI_API_KEY); only the gateway on this "
                    "host reads it, the sandbox never sees it.",
                ),
                click.option(
                    "--oracle", is_flag=True, help="Run the task's solution/solve.sh instead of an agent, no model."
                ),
                click.option(
                    "--no-preflight",
                    is_flag=True,
                    help="Skip the model server's preflight (runs that need no capture, e.g. an evaluation).",
                ),
                click.option(
                    "--logprobs-mode",
                    type=click.Choice(LOGPROBS_MODES),
                    help="What the server's logprobs are (vLLM --logprobs-mode); default: what the preflight finds.",
                ),
                click.option(
                    "--expect-logprobs",
                    type=click.Choice(LOGPROBS_MODES),
                    default="raw",
                    show_default=True,
                    help="The logprobs the trainer uses; rollouts stamped otherwise are not trainable.",
                ),
                click.option(
                    "--verifier-network",
                    type=click.Choice(["none", "bridge"]),
                    default="none",
                    show_default=True,
                    help="The verifier's network (the agent never has one). bridge: tasks whose allow_internet is "
                    "true (Harbor's default) get one once the agent is dead, as Terminal-Bench's test.sh files need "
                    "to fetch uv and pytest; it reaches this host's ports and the internet.",
                ),
                json_option,
            ]
        ):
            decorated = option(decorated)
        return decorated

    return decorate


@click.command("run")
@_model_options()
@backend_options
@click.option(
    "--task",
    "task_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Task directory (Harbor layout).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="The rollout writes OUT/<rollout_id>/.",
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
    from agentbake.runner.display import err, print_result, warn
    from agentbake.runner.runner import Runner
    from agentbake.runner.runner_config import SCRIPTED
    from agentbake.runner.teardown import teardown_on_signals
    from agentbake.tasks import load_task

    task = load_task(task_dir)
    warn(task.warnings)
    config = make_config(gateway=backend.gateway, out_dir=out_dir)
    with teardown_on_signals(runner := Runner(config, backend.config(), build_progress=_build_progress)):
        if config.model == SCRIPTED:
            runner.start_scripted([task])
        try:
            _prepare_images(runner, [task])
            result = runner.run(task)
        except KeyboardInterrupt:
            err.print("[yellow]interrupted:[/] removed the rollout's sandbox and gateway")
            sys.exit(130)
    if as_json:
        print_json(result.summary())
    else:
        print_result(result)
    if not result.ok:
        sys.exit(1)


@click.command("rollout")
@_model_options()
@backend_options
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
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The job directory, new or empty: config.json, <task>__<attempt>/ per rollout, summary.json "
    "[default: jobs/<start time>].",
)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Continue the job in this directory, running only the rollouts without a result. Alone it takes every "
    "setting from DIR/config.json; with IMAGE, --tasks and the rest they must be the job's own (-n, --warm and "
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
    out_dir: Path | None,
    resume_dir: Path | None,
    backend: BackendChoice,
) -> None:
    """Run every task N_ATTEMPTS times on IMAGE, N_CONCURRENT at once, into a job directory (--out), with live
    progress, then print a summary table. `--resume DIR` continues an interrupted job."""
    from agentbake.runner.display import BatchDisplay, err, print_summary
    from agentbake.runner.job import SUMMARY_FILE
    from agentbake.runner.runner import Runner
    from agentbake.runner.runner_config import SCRIPTED
    from agentbake.runner.teardown import teardown_on_signals

    job, tasks = _job(image, make_config, task_dirs, n_attempts, n_concurrent, warm, out_dir, resume_dir, backend)
    config = job.config
    pending = job.pending(tasks)
    if resume_dir is not None:
        err.print(f"resuming {job.dir}: {len(job.rollouts()) - len(pending)} rollouts finished, {len(pending)} to run")
    if pending:
        display = BatchDisplay(len(pending))
        backend_config = config.backend.config(warm=config.runner.warm)
        with teardown_on_signals(runner := Runner(config.runner, backend_config, build_progress=_build_progress)):
            if config.runner.model == SCRIPTED:
                runner.start_scripted(tasks)
            try:
                _prepare_images(runner, tasks)
                with display:
                    for _ in runner.iter_rollouts(pending, concurrency=config.n_concurrent, on_progress=display.update):
                        pass
            except KeyboardInterrupt:
                err.print(
                    "[yellow]interrupted:[/] removed the batch's sandboxes and gateways; the finished rollouts are "
                    f"kept and `agentbake rollout --resume {job.dir}` runs the others"
                )
                sys.exit(130)
            finally:
                job.write_summary()  # also when interrupted (SIGTERM, Ctrl-C): what finished so far
    summary = job.write_summary()
    results = [result for _, _, result in job.results()]
    if as_json:
        for result in results:
            print_json(result.summary())
        print_json({"summary": summary["summary"], "job": str(job.dir), "complete": summary["complete"]})
    else:
        print_summary(results)
        err.print(
            f"job {job.dir}: {summary['finished']}/{summary['total']} rollouts finished; totals in {SUMMARY_FILE}"
        )


def _build_progress(what: str) -> ConsoleProgress:
    """A build's progress on stderr (stdout stays the `--json` output)."""
    from agentbake.buildkit.progress import ConsoleProgress
    from agentbake.runner.display import err

    err.print(f"building {what} (missing on this engine)")
    return ConsoleProgress(what, err)


def _prepare_images(runner: Runner, tasks: list[Task]) -> None:
    """Build what the tasks' own images lack before the first rollout, with progress. A task whose image
    cannot be had is reported here; its rollouts then end as `sandbox_error` with the same message."""
    from rich.markup import escape

    from agentbake.runner.display import err

    for task in tasks:
        if task.has_own_image and runner.backend.capabilities.task_images:
            try:
                runner.images.resolve(task)
            except AgentbakeError as exc:
                err.print(f"[red]error:[/] {escape(str(exc))}")


# What `--resume DIR` alone may set; every other setting comes from the job's config.json.
_RESUME_MAY_SET = ("resume_dir", "as_json", "n_concurrent", "warm", "relay_listen", "relay_url")


def _job(
    image: str | None,
    make_config: Callable[..., RunnerConfig],
    task_dirs: tuple[Path, ...],
    n_attempts: int,
    n_concurrent: int,
    warm: int,
    out_dir: Path | None,
    resume_dir: Path | None,
    backend: BackendChoice,
) -> tuple[Job, list[Task]]:
    """The job to run, with the settings to run it with, and its tasks: a new job (in --out); the one
    --resume names, with its own settings (no IMAGE given); or that one, checked against those given."""
    from agentbake.runner.display import warn
    from agentbake.runner.job import Job, JobConfig, JobTask
    from agentbake.tasks import discover_tasks

    if resume_dir is not None and out_dir is not None:
        raise click.UsageError("--resume DIR is the job's directory: drop --out")
    if resume_dir is not None and image is None:
        job = Job.open(resume_dir)
        return Job(job.dir, _own_settings(job.config, resume_dir, backend)), job.load_tasks()
    if not task_dirs:
        raise click.UsageError("--tasks is required: a task directory or a folder of them (or --resume DIR)")
    tasks = discover_tasks(task_dirs)
    for task in tasks:
        warn(task.warnings)
    directory = (resume_dir or out_dir or Path("jobs") / time.strftime("%Y-%m-%d__%H-%M-%S")).absolute()
    config = JobConfig(
        # A resume checks the tag first: a catalog changed since the job started is refused, not built.
        runner=make_config(warm=warm, gateway=backend.gateway, out_dir=directory, build_missing=resume_dir is None),
        backend=backend,
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
    """A job resumed by `--resume DIR` alone: its own settings, with the runtime ones the command line gave
    (-n, --warm, the relay's); any other option given is refused, naming it."""
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
            "(or repeat the job's whole command, IMAGE and --tasks included, with --resume to have them checked)"
        )
    relay = {name: getattr(backend, name) for name in ("relay_listen", "relay_url") if name in given}
    runner = {"out_dir": resume_dir.absolute(), **({"warm": ctx.params["warm"]} if "warm" in given else {})}
    update: dict[str, Any] = {
        "runner": stored.runner.model_copy(update=runner),
        "backend": dataclasses.replace(stored.backend, **relay),
    }
    if "n_concurrent" in given:
        update["n_concurrent"] = ctx.params["n_concurrent"]
    return stored.model_copy(update=update)


# -- helpers --------------------------------------------------------------------------------------


def resolve_image(image: str, *, build_missing: bool = True) -> str:
    """A catalog name to its current content tag, built (with progress) when the engine lacks it and
    `build_missing`; a reference with a ':' or '/' is taken as it is."""
    from agentbake.buildkit.build import build, plan
    from agentbake.buildkit.ca import detect_ca_bundle
    from agentbake.buildkit.catalog import Catalog
    from agentbake.buildkit.engine import connect, find_image

    client = connect()
    if ":" in image or "/" in image:
        if find_image(client, image) is None:
            raise AgentbakeError(f"image {image!r} is not on this engine; build a catalog image with `agentbake build`")
        return image
    catalog = Catalog.discover()
    build_plan = plan(client, catalog.load(image), catalog.templates_dir, ca_cert=detect_ca_bundle())
    if build_missing and find_image(client, build_plan.tag) is None:
        progress = _build_progress(build_plan.tag)  # rich's progress bars only when something builds
        try:
            build(client, build_plan, progress=progress)
        finally:
            progress.close()
    return build_plan.tag
