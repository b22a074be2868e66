"""The `agentbake` command line: one click group, subcommands from each package.

Subcommands are imported when used: the gateway, run inside every sandbox, must not pay for the
build kit's imports (docker SDK, rich) in start-up time and resident memory.
"""

from __future__ import annotations

import atexit
import gc
import importlib
from typing import Any

import click

from agentbake import __version__
from agentbake.errors import AgentbakeError, BuildError

# At exit the interpreter's last garbage collections walk every object a command made (the engine's SDK, pydantic's
# schemas) for nothing: the process ends. Frozen, they are skipped (issue 17: tens of ms of `agentbake run`).
atexit.register(gc.freeze)

# name -> "module:attribute" of its click command
COMMANDS = {
    "audit": "agentbake.audit.cli:audit_command",
    "base": "agentbake.buildkit.cli:base_group",
    "build": "agentbake.buildkit.cli:build_command",
    "ci-matrix": "agentbake.publish.cli:ci_matrix_command",
    "docs": "agentbake.shipped:docs_command",
    "doctor": "agentbake.buildkit.cli:doctor_command",
    "examples": "agentbake.shipped:examples_command",
    "gateway": "agentbake.gateway.cli:gateway",
    "gc": "agentbake.runner.cli.commands:gc_command",
    "images": "agentbake.buildkit.cli:images_command",
    "lock": "agentbake.buildkit.cli:lock_command",
    "preflight": "agentbake.gateway.cli:preflight",
    "prune": "agentbake.buildkit.cli:prune_command",
    "publish": "agentbake.publish.cli:publish_command",
    "published": "agentbake.publish.cli:published_command",
    "render": "agentbake.buildkit.cli:render_command",
    "rollout": "agentbake.runner.cli.commands:rollout_command",
    "run": "agentbake.runner.cli.commands:run_command",
    "scripted-llm": "agentbake.scripted.cli:scripted_llm",
    "trace": "agentbake.gateway.cli:trace",
}


class _Group(click.Group):
    """Loads subcommands on demand; prints agentbake's own errors as one clear message, no traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name].split(":")
        return getattr(importlib.import_module(module), attribute)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AgentbakeError as exc:
            from rich.console import Console
            from rich.markup import escape

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
