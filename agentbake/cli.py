"""The `agentbake` command line: one click group, subcommands from each package."""

from __future__ import annotations

import click

from agentbake import __version__


@click.group()
@click.version_option(__version__, prog_name="agentbake")
def main() -> None:
    """Build, publish and run sandboxes for training coding agents."""


from agentbake.gateway.cli import gateway, trace  # noqa: E402

main.add_command(gateway)
main.add_command(trace)
