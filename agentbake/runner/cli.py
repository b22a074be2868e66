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
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from agentbake.buildkit.engine import connect
from agentbake.clikit import json_option, model_options, print_json, tasks_option
from agentbake.errors import AgentbakeError
from agentbake.gateway.config import LOGPROBS_MODES, ModelSettings
from agentbake.runner.backend_options import BackendChoice, backend_options
from agentbake.runner.docker.gc import Leftover, collect
from agentbake.runner.result import RolloutResult, summarize_results
from agentbake.runner.runner_config import SCRIPTED, RunnerConfig
from agentbake.runner.teardown import teardown_on_signals

err = Console(stderr=True, highlight=False, soft_wrap=True)


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
    leftovers = collect(connect(timeout=60).api, dry_run=dry_run, runtime_dir=runtime_dir)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "leftovers": [dataclasses.asdict(x) for x in leftovers]}))
    else:
        _report(leftovers, dry_run)
    if any(item.error for item in leftovers):
        raise click.exceptions.Exit(1)


def _report(leftovers: list[Leftover], dry_run: bool) -> None:
    verb = "would remove" if dry_run else "removed"
    for item in leftovers:
        state = verb if item.removed or dry_run else f"[red]failed[/] ({escape(item.error or '')})"
        err.print(f"{state} {item.kind} {escape(item.name)} (rollout {escape(item.rollout or '-')}, {item.reason})")
    if not leftovers:
        err.print("nothing to remove")


def _model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options `run` and `rollout` share: image resolution, model, key, preflight and logprobs modes,
    the gateway's model settings, output, `--json`. The command
    receives `as_json` and `make_config`, which builds the RunnerConfig from them and the command's own fields
    (warm, gateway), resolving the image; a setting RunnerConfig refuses is a usage error."""

    @functools.wraps(command)
    def wrapper(
        *args: Any,
        image: str,
        model: str,
        model_name: str | None,
        api_key_env: str,
        oracle: bool,
        out_dir: Path,
        no_preflight: bool,
        logprobs_mode: str | None,
        expect_logprobs: str,
        **kwargs: Any,
    ) -> Any:
        settings = {name: kwargs.pop(name) for name in ModelSettings.model_fields}

        def make_config(**extra: Any) -> RunnerConfig:
            try:
                return RunnerConfig(
                    image=resolve_image(image),
                    model=None if oracle else model,
                    model_name=model_name,
                    api_key_env=api_key_env,
                    oracle=oracle,
                    out_dir=out_dir,
                    preflight=not no_preflight,
                    logprobs_mode=logprobs_mode,
                    expect_logprobs=expect_logprobs,
                    model_settings=ModelSettings(**settings),
                    **extra,
                )
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors())
                raise click.UsageError(problems) from None

        return command(*args, make_config=make_config, **kwargs)

    # The gateway's model settings (--inner-system-as-user, --disable-thinking, --temperature, ...), from
    # ModelSettings' fields as `agentbake gateway` has them.
    decorated: Callable[..., Any] = model_options(ModelSettings)(wrapper)
    for option in reversed(
        [
            click.argument("image"),
            click.option(
                "--model",
                default=SCRIPTED,
                show_default=True,
                help="'scripted' (the built-in model that plays each task's solution/solve.sh) or the base URL "
                "of an OpenAI-compatible server, with its /v1.",
            ),
            click.option("--model-name", help="Model name sent upstream and configured in the agent."),
            click.option(
                "--api-key-env",
                default="AGENTBAKE_UPSTREAM_API_KEY",
                show_default=True,
                help="Variable holding the upstream API key; only the gateway on this host reads it.",
            ),
            click.option("--oracle", is_flag=True, help="Run the task's solution/solve.sh instead of an agent."),
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
                "--out",
                "out_dir",
                type=click.Path(file_okay=False, path_type=Path),
                default=Path("out"),
                show_default=True,
                help="Each rollout writes OUT/<rollout_id>/.",
            ),
            json_option,
        ]
    ):
        decorated = option(decorated)
    return decorated


@click.command("run")
@_model_options
@backend_options
@click.option(
    "--task",
    "task_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Task directory (Harbor layout).",
)
def run_command(
    make_config: Callable[..., RunnerConfig], as_json: bool, task_dir: Path, backend: BackendChoice
) -> None:
    """Run one rollout of IMAGE (a catalog name, built when missing, or a tag) on one task.

    Exits 1 when the status is not `ok` (the reward alone never fails the command)."""
    from agentbake.runner.runner import Runner
    from agentbake.tasks import load_task

    task = load_task(task_dir)
    _warn(task.warnings)
    config = make_config(gateway=backend.gateway)
    with teardown_on_signals(runner := Runner(config, backend.config())):
        if config.model == SCRIPTED:
            runner.start_scripted([task])
        try:
            result = runner.run(task)
        except KeyboardInterrupt:
            err.print("[yellow]interrupted:[/] removed the rollout's sandbox and gateway")
            sys.exit(130)
    if as_json:
        print_json(result.summary())
    else:
        _print_result(result)
    if not result.ok:
        sys.exit(1)


@click.command("rollout")
@_model_options
@backend_options
@tasks_option("A task directory or a folder of them; repeat for more.")
@click.option("-n", "--repeats", default=1, show_default=True, type=click.IntRange(min=1), help="Rollouts per task.")
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(min=1), help="Rollouts at once.")
@click.option("--warm", default=0, show_default=True, type=click.IntRange(min=0), help="Sandboxes kept started.")
def rollout_command(
    make_config: Callable[..., RunnerConfig],
    as_json: bool,
    task_dirs: tuple[Path, ...],
    repeats: int,
    concurrency: int,
    warm: int,
    backend: BackendChoice,
) -> None:
    """Run every task REPEATS times on IMAGE with live progress, then print a summary table."""
    from agentbake.runner.runner import Runner
    from agentbake.tasks import discover_tasks

    tasks = discover_tasks(task_dirs)
    for task in tasks:
        _warn(task.warnings)
    config = make_config(warm=warm, gateway=backend.gateway)
    display = _BatchDisplay(len(tasks) * repeats)
    with teardown_on_signals(runner := Runner(config, backend.config(warm=warm))):
        if config.model == SCRIPTED:
            runner.start_scripted(tasks)
        try:
            with display:
                results = runner.run_batch(tasks, repeats=repeats, concurrency=concurrency, on_progress=display.update)
        except KeyboardInterrupt:
            err.print("[yellow]interrupted:[/] removed the batch's sandboxes and gateways")
            sys.exit(130)
    summary = summarize_results(results)
    if as_json:
        for result in results:
            print_json(result.summary())
        print_json({"summary": summary.as_dict()})
    else:
        _print_summary(results)


# -- helpers --------------------------------------------------------------------------------------


def resolve_image(image: str) -> str:
    """A catalog name to its current content tag, built (with progress) when the engine lacks it; a
    reference with a ':' or '/' is taken as it is."""
    from agentbake.buildkit.build import build, plan
    from agentbake.buildkit.ca import detect_ca_bundle
    from agentbake.buildkit.catalog import Catalog
    from agentbake.buildkit.engine import connect, find_image
    from agentbake.buildkit.progress import ConsoleProgress

    client = connect()
    if ":" in image or "/" in image:
        if find_image(client, image) is None:
            raise AgentbakeError(f"image {image!r} is not on this engine; build a catalog image with `agentbake build`")
        return image
    catalog = Catalog.discover()
    build_plan = plan(client, catalog.load(image), catalog.templates_dir, ca_cert=detect_ca_bundle())
    if find_image(client, build_plan.tag) is None:
        err.print(f"building {build_plan.tag} (missing on this engine)")
        progress = ConsoleProgress(image, err)
        try:
            build(client, build_plan, progress=progress)
        finally:
            progress.close()
    return build_plan.tag


def _warn(warnings: tuple[str, ...]) -> None:
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {warning}", markup=True)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _print_result(result: RolloutResult) -> None:
    colour = "green" if result.ok else "red"
    err.print(f"[{colour}]{result.status.value}[/] reward {result.reward:g}  {result.rollout_id}  ({result.agent})")
    if result.error:
        err.print(f"  {result.error}", markup=False)
    phases = "  ".join(f"{name} {seconds:.2f}s" for name, seconds in result.timings.items())
    err.print(f"  {phases}", markup=False)
    err.print(f"  turns {result.turns}, tokens captured {result.tokens}; files in {result.out_dir}", markup=False)


class _BatchDisplay:
    """Done / running / failed, mean reward and ETA, live on stderr (a line per rollout when not a terminal)."""

    def __init__(self, total: int) -> None:
        self.total, self.started = total, time.monotonic()
        self.live = Live(self._render(0, 0, 0, None), console=err, refresh_per_second=4) if err.is_terminal else None
        self._printed = 0

    def __enter__(self) -> _BatchDisplay:
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()

    def _render(self, done: int, running: int, failed: int, mean: float | None) -> str:
        elapsed = time.monotonic() - self.started
        eta = "-" if not done else f"{elapsed / done * (self.total - done):.0f}s"
        reward = "-" if mean is None else f"{mean:.3f}"
        return (
            f"rollouts {done}/{self.total} done, {running} running, {failed} failed | "
            f"mean reward {reward} | {elapsed:.0f}s elapsed, ETA {eta}"
        )

    def update(self, progress: Any) -> None:
        text = self._render(progress.done, progress.running, progress.failed, progress.mean_reward)
        if self.live:
            self.live.update(text)
            return
        for result in progress.results[self._printed :]:
            err.print(f"{result.status.value} reward {result.reward:g} {result.rollout_id} | {text}", markup=False)
        self._printed = len(progress.results)


def _print_summary(results: list[RolloutResult]) -> None:
    summary = summarize_results(results)
    table = Table("rollouts", "reward mean", "statuses", "turns", "tokens captured", "calls without ids")
    statuses = ", ".join(f"{name} {count}" for name, count in summary.statuses.items())
    mean = "-" if summary.reward_mean is None else f"{summary.reward_mean:.3f}"
    table.add_row(
        str(summary.rollouts),
        mean,
        statuses,
        str(summary.turns),
        str(summary.tokens),
        str(summary.calls_without_token_ids),
    )
    phases = Table("phase", "p50 (s)", "p95 (s)")
    for name, stats in summary.phases.items():
        phases.add_row(name, _seconds(stats["p50"]), _seconds(stats["p95"]))
    console = Console()
    console.print(table)
    console.print(phases)
