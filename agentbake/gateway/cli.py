"""`agentbake gateway` and `agentbake trace summary`.

Heavy imports (the server and the app) happen inside the commands so `agentbake --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--upstream", required=True, help="OpenAI-compatible base URL, with its /v1.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), help="JSONL trace file.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=int)
@click.option(
    "--api-key-env",
    default="AGENTBAKE_UPSTREAM_API_KEY",
    show_default=True,
    help="Environment variable holding the upstream key (keys are never taken from argv).",
)
@click.option(
    "--api-key-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="File holding the upstream key.",
)
@click.option("--model-override", help="Model name sent upstream on every request.")
@click.option(
    "--max-tokens-cap",
    default=8192,
    show_default=True,
    type=int,
    help="Cap on max_tokens / max_completion_tokens; 0 disables the cap.",
)
@click.option("--disable-thinking", is_flag=True, help="Send chat_template_kwargs.enable_thinking=false.")
@click.option(
    "--inner-system-as-user",
    is_flag=True,
    help="Send system messages after the first user turn as user messages (Qwen3-style templates).",
)
@click.option("--keep-billing-header", is_flag=True, help="Forward Claude Code's billing system block.")
@click.option(
    "--no-logprobs",
    is_flag=True,
    help="Do not inject logprobs (no logprobs recorded; ids still come from return_token_ids).",
)
@click.option("--top-logprobs", default=1, show_default=True, type=int)
@click.option(
    "--no-token-ids",
    is_flag=True,
    help="Do not ask for vLLM's return_tokens_as_token_ids / return_token_ids.",
)
@click.option("--max-body-bytes", default=64 * 1024 * 1024, show_default=True, type=int)
@click.option(
    "--read-timeout",
    default=600.0,
    show_default=True,
    type=float,
    help="Seconds without a byte from the upstream before a call fails.",
)
@click.option("--connect-timeout", default=10.0, show_default=True, type=float, help="Seconds to reach the upstream.")
@click.option("--max-connections", default=512, show_default=True, type=int, help="Upstream connection pool size.")
@click.option("--tokenize-url", help="vLLM /tokenize URL for count_tokens (default: upstream without /v1).")
@click.option("--log-level", default="warning", show_default=True)
def gateway(**options: object) -> None:
    """Serve the gateway: OpenAI and Anthropic dialects in front of an OpenAI-compatible upstream."""
    from agentbake.gateway.app import create_app
    from agentbake.gateway.config import GatewayConfig
    from agentbake.gateway.errors import ConfigError

    no_ids = bool(options["no_token_ids"])
    try:
        config = GatewayConfig(
            upstream=options["upstream"],
            trace=options["trace_path"],
            host=options["host"],
            port=options["port"],
            api_key_env=options["api_key_env"],
            api_key_file=options["api_key_file"],
            model_override=options["model_override"],
            max_tokens_cap=options["max_tokens_cap"] or None,
            disable_thinking=options["disable_thinking"],
            drop_billing_header=not options["keep_billing_header"],
            inner_system_as_user=options["inner_system_as_user"],
            capture_logprobs=not options["no_logprobs"],
            top_logprobs=options["top_logprobs"],
            tokens_as_token_ids=not no_ids,
            request_token_ids=not no_ids,
            max_body_bytes=options["max_body_bytes"],
            read_timeout_s=options["read_timeout"],
            connect_timeout_s=options["connect_timeout"],
            max_connections=options["max_connections"],
            tokenize_url=options["tokenize_url"],
            log_level=options["log_level"],
        )
        app = create_app(config)
    except (ConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    from agentbake.errors import ServeError
    from agentbake.serve import serve

    try:
        serve(app, host=config.host, port=config.port, uds=config.uds, log_level=config.log_level)
    except ServeError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group()
def trace() -> None:
    """Inspect gateway traces."""


@trace.command("summary")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def trace_summary(path: Path) -> None:
    """Print turns, captured tokens, errors and retries of a trace file."""
    from agentbake.gateway.trace import read_trace, summarize

    try:
        summary = summarize(read_trace(path))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"turns: {summary.turns}")
    click.echo(f"rollouts: {summary.rollouts}")
    click.echo(f"tokens captured: {summary.tokens}")
    click.echo(f"calls without token ids: {summary.calls_without_ids}")
    click.echo(f"errors: {summary.errors}")
    click.echo(f"retries: {summary.retries}")
    for dialect, count in sorted(summary.by_dialect.items()):
        click.echo(f"dialect {dialect}: {count}")
