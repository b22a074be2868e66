"""The `agentbake` command line: one click group, subcommands from each package."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from agentbake import __version__
from agentbake.buildkit.cli import COMMANDS as BUILDKIT_COMMANDS
from agentbake.errors import AgentbakeError, BuildError
from agentbake.gateway.cli import gateway, trace


class _Group(click.Group):
    """Prints agentbake's own errors as one clear message (and a build's failing output), no traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AgentbakeError as exc:
            console = Console(stderr=True, highlight=False)
            if isinstance(exc, BuildError) and exc.output_tail:
                console.print(f"[bold]last output of {escape(str(exc.step))}:[/]")
                for line in exc.output_tail:
                    console.print(f"  {line}", markup=False, soft_wrap=True)
            console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            ctx.exit(1)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="agentbake")
def main() -> None:
    """Build, publish and run sandboxes for training coding agents."""


for _command in (*BUILDKIT_COMMANDS, gateway, trace):
    main.add_command(_command)
