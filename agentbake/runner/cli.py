"""Runner commands: `agentbake gc`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from agentbake.buildkit.engine import connect
from agentbake.runner.gc import Leftover, collect

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
