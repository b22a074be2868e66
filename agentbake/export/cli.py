"""`agentbake trace export`: a trace's rollouts as training sequences (added to the gateway's `trace` group)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentbake.clikit import RenamedOptions, json_option, print_json
from agentbake.gateway.config import LOGPROBS_MODES


@click.command("export", cls=RenamedOptions, renamed={"--out": "--output"})
@click.argument("trace_path", metavar="TRACE.jsonl", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--rollout", "rollout_id", help="Export only this rollout (default: every rollout, one JSON line each).")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "trl"]),
    default="json",
    show_default=True,
    help="json: sequences and validation per rollout; trl: one TRL GRPO row per rollout (prompt and completion ids, "
    "logprobs, env_mask).",
)
@click.option(
    "-o", "--output", "out_file", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout."
)
@click.option(
    "--logprobs",
    type=click.Choice(LOGPROBS_MODES),
    default="raw",
    show_default=True,
    help="The logprobs the trainer expects (vLLM --logprobs-mode); records stamped otherwise are untrainable.",
)
@json_option
def export_command(
    trace_path: Path, rollout_id: str | None, output_format: str, out_file: Path | None, logprobs: str, as_json: bool
) -> None:
    """Export each rollout's calls as training data: sequences with loss masks (json) or TRL GRPO rows (trl).

    With --output, prints one summary per rollout (rollout, calls, sequences by role, trainable) on stderr, or
    as JSON lines on stdout with --json."""
    from agentbake.export.api import dumps, export, write_sequences
    from agentbake.export.reader import ALL_ROLLOUTS, index_trace

    if rollout_id is not None:
        present = list(index_trace(trace_path).lines)
        if rollout_id not in present:
            shown = ", ".join(repr(r) for r in present[:10]) or "none"
            raise click.ClickException(f"{trace_path} holds no record of rollout {rollout_id!r}; its rollouts: {shown}")
    if out_file is None:
        ids = None if rollout_id is None else [rollout_id]
        for document in export(trace_path, rollout_ids=ids, logprobs=logprobs):  # type: ignore[arg-type]
            sys.stdout.buffer.write(dumps(document, format=output_format))  # type: ignore[arg-type]
        return
    chosen = ALL_ROLLOUTS if rollout_id is None else rollout_id
    summaries = write_sequences(trace_path, out_file, rollout_id=chosen, format=output_format, logprobs=logprobs)  # type: ignore[arg-type]
    for item in summaries:
        if as_json:
            print_json(item)
        else:
            roles = ", ".join(f"{n} {role}" for role, n in sorted(item["sequences"].items())) or "no sequences"
            verdict = "trainable" if item["trainable"] else "NOT trainable"
            click.echo(
                f"{item['rollout_id']}: {item['calls']} calls, {roles}; {verdict}"
                f" ({item['errors']} errors, {item['warnings']} warnings)",
                err=True,
            )
