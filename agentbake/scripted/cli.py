"""`agentbake scripted-llm`: serve the scripted model so agents (through the gateway) can run tasks offline.

The server is imported inside the command so `agentbake --help` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from pathlib import Path

import click

from agentbake.clikit import RenamedOptions, tasks_option


@click.command("scripted-llm", cls=RenamedOptions, renamed={"--tasks": "--path"})
@tasks_option("A task directory or a folder of them (repeatable); the model plays their solution/solve.sh.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int, help="0 picks a free port.")
@click.option("--model-name", default="scripted", show_default=True, help="The model id /v1/models lists.")
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A Hugging Face tokenizer folder (tokenizer.json and a chat template, read from disk): ids in its "
    "vocabulary, prompts rendered by its template, as vLLM serving a model with it. Default: toy ids.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line (url, tasks) once listening.")
def scripted_llm(
    task_dirs: tuple[Path, ...], host: str, port: int, model_name: str, tokenizer: Path | None, as_json: bool
) -> None:
    """Serve an OpenAI-compatible model that plays each task's reference solution through the agent's shell
    tool, answering with vLLM's token ids and logprobs. Ctrl-C or SIGTERM stops it."""
    from agentbake.scripted.app import start_scripted_model
    from agentbake.tasks import discover_tasks

    loaded = discover_tasks(task_dirs)
    names = [task.name for task in loaded]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with start_scripted_model(loaded, host=host, port=port, model_name=model_name, tokenizer=tokenizer) as served:
        if as_json:
            click.echo(json.dumps({"url": served.url, "openai_base_url": served.url + "/v1", "tasks": names}))
        else:
            click.echo(f"scripted model: {len(names)} task(s), OpenAI base URL {served.url}/v1", err=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: leave the block, which stops the server
            stop.wait()
