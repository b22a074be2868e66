"""`agentbake gateway`, `agentbake preflight` and `agentbake trace summary`.

The gateway's options are generated from GatewayConfig's fields (name, type, default, docstring as help),
so a new setting is one documented field. Heavy imports (the server and the app) happen inside the
commands so `agentbake --help` stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from agentbake.clikit import build_model, json_option, model_options, print_json
from agentbake.gateway.config import LOGPROBS_MODES, GatewayConfig

if TYPE_CHECKING:
    from agentbake.gateway.trace import Trace

# Options whose spelling differs from `--field-name`.
OPTION_NAMES = {
    "read_timeout_s": "--read-timeout",
    "connect_timeout_s": "--connect-timeout",
    "capture_logprobs": "--capture-logprobs/--no-logprobs",
    "drop_billing_header": "--drop-billing-header/--keep-billing-header",
    "max_completion_tokens_models": "--max-completion-tokens-model",
}
# Secrets never come from argv (it shows in `ps`): the upstream key has --api-key-env/--api-key-file,
# the client token --client-token-env.
SECRET_FIELDS = ("client_token",)


@click.command()
@model_options(GatewayConfig, names=OPTION_NAMES, skip=SECRET_FIELDS)
@click.option(
    "--no-token-ids",
    is_flag=True,
    help="Shorthand for --no-tokens-as-token-ids --no-request-token-ids (upstreams that are not vLLM).",
)
@click.option(
    "--client-token-env",
    metavar="VAR",
    help="Environment variable holding the client token every request must carry (see client_token).",
)
def gateway(no_token_ids: bool, client_token_env: str | None, **fields: object) -> None:
    """Serve the gateway: OpenAI chat, Responses and Anthropic dialects in front of an OpenAI-compatible upstream."""
    from agentbake.errors import ConfigError, ServeError
    from agentbake.gateway.app import create_app
    from agentbake.serve import serve

    if no_token_ids:
        fields.update(tokens_as_token_ids=False, request_token_ids=False)
    if client_token_env:
        token = os.environ.get(client_token_env)
        if not token:
            raise click.ClickException(f"--client-token-env: environment variable {client_token_env} is not set")
        fields["client_token"] = token
    config = build_model(GatewayConfig, fields, names=OPTION_NAMES)
    try:
        app = create_app(config)
        serve(
            app,
            host=config.host,
            port=config.port,
            uds=config.uds,
            log_level=config.log_level,
            limits=config.connection_limits,
        )
    except (ConfigError, ServeError) as exc:
        raise click.ClickException(str(exc)) from exc


@click.command()
@click.option("--upstream", required=True, help="Base URL of the OpenAI-compatible server, including its /v1.")
@click.option("--model", "model", help="Model to ask; default: the first one the server's /models lists.")
@click.option(
    "--api-key-env",
    default=GatewayConfig.model_fields["api_key_env"].default,
    show_default=True,
    help="Environment variable holding the upstream API key (never argv).",
)
@click.option("--api-key-file", type=click.Path(path_type=Path), help="File holding the upstream API key.")
@click.option("--upstream-ca-file", type=click.Path(path_type=Path), help="PEM CA bundle for an https upstream.")
@click.option("--no-token-ids", is_flag=True, help="Do not ask for vLLM's token-id fields (as the gateway's flag).")
@click.option(
    "--logprobs-mode",
    type=click.Choice(LOGPROBS_MODES),
    help="What the gateway will be told the logprobs are; a server shown to send the other is not capturable.",
)
@json_option
def preflight(
    upstream: str,
    model: str | None,
    api_key_env: str,
    api_key_file: Path | None,
    upstream_ca_file: Path | None,
    no_token_ids: bool,
    logprobs_mode: str | None,
    as_json: bool,
) -> None:
    """Check that an upstream's answers can be captured: logprobs, token ids, prompt ids, tool calls, logprobs mode.

    Exits 1 when not capturable."""
    import dataclasses

    from agentbake.errors import ConfigError
    from agentbake.gateway.preflight import run_preflight

    fields: dict[str, object] = {"upstream": upstream, "model_override": model, "api_key_env": api_key_env}
    fields.update(api_key_file=api_key_file, upstream_ca_file=upstream_ca_file, logprobs_mode=logprobs_mode)
    if no_token_ids:
        fields.update(tokens_as_token_ids=False, request_token_ids=False)
    config = build_model(GatewayConfig, fields)
    try:
        report = run_preflight(config)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        print_json({**dataclasses.asdict(report), "ok": report.ok, "missing": report.missing})
    else:
        click.echo(report.summary())
    if not report.ok:
        raise SystemExit(1)


class _TraceGroup(click.Group):
    """`trace` subcommands; `export` (agentbake.export) is imported only when used, never by the gateway."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), "export"])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "export":
            from agentbake.export.cli import export_command

            return export_command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_TraceGroup)
def trace() -> None:
    """Inspect gateway traces."""


@trace.command("summary")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
def trace_summary(path: Path, as_json: bool) -> None:
    """Print turns, captured tokens, errors and retries of a trace file."""
    from agentbake.gateway.trace import summarize

    summary = summarize(_load(path).records)
    if as_json:
        print_json(summary)
        return
    click.echo(f"turns: {summary.turns}")
    click.echo(f"rollouts: {summary.rollouts}")
    click.echo(f"tokens captured: {summary.tokens}")
    click.echo(f"calls without token ids: {summary.calls_without_ids}")
    click.echo(f"errors: {summary.errors}")
    click.echo(f"retries: {summary.retries}")
    for dialect, count in sorted(summary.by_dialect.items()):
        click.echo(f"dialect {dialect}: {count}")
    for verdict, count in sorted(summary.by_capture.items()):
        click.echo(f"capture {verdict}: {count}")
    for mode, count in sorted(summary.by_logprobs_mode.items()):
        click.echo(f"logprobs {mode}: {count}")
    for route, count in sorted(summary.by_route.items()):
        click.echo(f"token-in route {route}: {count}")


@trace.command("check")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
def trace_check(path: Path, as_json: bool) -> None:
    """Per rollout, whether each call's prompt ids extend the previous call's prompt + completion ids.

    Exits 1 when a prompt re-renders what an earlier call sampled: concatenated turns would not be what the model
    generated."""
    import dataclasses

    from agentbake.gateway.trace import check

    results = check(_load(path).records)
    for result in results:
        if as_json:
            print_json({**dataclasses.asdict(result), "consistent": result.consistent})
            continue
        captures = ", ".join(f"{verdict} {count}" for verdict, count in sorted(result.by_capture.items()))
        click.echo(
            f"rollout {result.rollout_id}: {result.calls} calls, {result.checked} checked: {result.extends} extend,"
            f" {result.restarts} restart, {result.rerendered} re-rendered; capture {captures}"
        )
        for item in result.breaks:
            click.echo(
                f"  turn {item['turn']} vs turn {item['previous_turn']}: diverges at {item['diverged_at']} (in the"
                f" previous {item['diverged_in']}); from index {item['around']} expected {item['expected']},"
                f" found {item['found']}"
            )
    if not all(result.consistent for result in results):
        raise SystemExit(1)


def _load(path: Path) -> Trace:
    """The trace, each line it skips said on stderr (as a warning: the records around it still count)."""
    from agentbake.errors import TraceError
    from agentbake.gateway.trace import load_trace

    try:
        trace = load_trace(path)
    except TraceError as exc:
        raise click.ClickException(str(exc)) from exc
    for skipped in trace.skipped:
        click.echo(f"warning: {skipped.message}", err=True)
    return trace
