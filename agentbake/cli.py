"""The `agentbake` command line: one click group, subcommands from each package.

Subcommands are imported when used, so the gateway inside every sandbox skips the build kit's imports. `agentbake
--help` lists them from `COMMANDS` without importing any. `-h` is `--help` on every command.
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
# schemas) for nothing: the process ends. Frozen, they are skipped, which saves tens of ms of `agentbake run`.
atexit.register(gc.freeze)

# name -> ("module:attribute" of its click command, its one-line summary). The summary lives here so that
# `agentbake --help` lists every command without importing any.
COMMANDS = {
    "audit": ("agentbake.audit.cli:audit_command", "Run generic exploits against each task's verifier."),
    "base": ("agentbake.buildkit.cli:base_group", "Base images for engines that cannot pull from a registry."),
    "build": ("agentbake.buildkit.cli:build_command", "Build images; an unchanged image is found, not rebuilt."),
    "ci-matrix": ("agentbake.publish.cli:ci_matrix_command", "Print the catalog as a GitHub Actions matrix."),
    "docs": ("agentbake.shipped:docs_command", "List the guides shipped with agentbake, or print one."),
    "doctor": ("agentbake.buildkit.cli:doctor_command", "Check the engine, base images, CA bundle and disk."),
    "examples": ("agentbake.shipped:examples_command", "Copy the example tasks into a folder."),
    "gateway": ("agentbake.gateway.cli:gateway", "Serve the token-capturing gateway in front of a model."),
    "gc": ("agentbake.runner.cli.commands:gc_command", "Remove sandboxes that expired or whose runner is gone."),
    "images": ("agentbake.buildkit.cli:images_command", "List the catalog: agents, locked versions, tags."),
    "lock": ("agentbake.buildkit.cli:lock_command", "Resolve an image's versions to exact, hashed ones."),
    "preflight": ("agentbake.gateway.cli:preflight", "Check that a model server's answers can be captured."),
    "prune": ("agentbake.buildkit.cli:prune_command", "Remove images that current inputs no longer build to."),
    "publish": ("agentbake.publish.cli:publish_command", "Publish images to a registry, E2B and Hugging Face."),
    "published": ("agentbake.publish.cli:published_command", "Print the published manifest."),
    "render": ("agentbake.buildkit.cli:render_command", "Print an image's Dockerfile and build context."),
    "report": ("agentbake.report.cli:report_command", "Write a job's report (or two jobs') as one HTML file."),
    "rollout": (
        "agentbake.runner.cli.commands:rollout_command",
        "Run each task k times on an image, into a job directory.",
    ),
    "run": ("agentbake.runner.cli.commands:run_command", "Run one rollout of an image on one task."),
    "scripted-llm": ("agentbake.scripted.cli:scripted_llm", "Serve a model that plays each task's solution."),
    "trace": ("agentbake.gateway.cli:trace", "Inspect gateway traces."),
}


class _Group(click.Group):
    """Loads a subcommand only when it runs (its summary comes from `COMMANDS`); prints agentbake's own errors
    as one clear message, no traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        target, summary = COMMANDS[cmd_name]
        module, attribute = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        command.short_help = summary  # shell completion shows what `agentbake --help` lists
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])

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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentbake")
def main() -> None:
    """Build, publish and run sandboxes for training coding agents."""
