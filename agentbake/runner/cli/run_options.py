"""The options `agentbake run` and `agentbake rollout` share, and the `RunnerConfig` they make.

They cover the image or `--agent`, the model and its key, and the preflight and logprobs modes. They also cover the
verifier's network, the agent's user, model settings and `--json`. The backend's are in `backend_options.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from agentbake.clikit import field_options, json_option
from agentbake.gateway.settings import LOGPROBS_MODES, MODEL_SETTINGS, UPSTREAM_API_KEY_ENV
from agentbake.runner.choices import AGENT_NETWORKS, DEFAULT_EXPECT_LOGPROBS, VERIFIER_MODES, VERIFIER_NETWORKS

# The options' choices, defaults and help come from plain modules; pydantic and the config models are imported
# only when the command runs (make_config): `run --help` does without them.
if TYPE_CHECKING:
    from agentbake.runner.runner_config import RunnerConfig

MODEL_REQUIRED = (
    "--upstream is required for an agent run: 'scripted' (the built-in model that plays each task's "
    "solution/solve.sh) or the base URL of an OpenAI-compatible server with its /v1; or --oracle (no model)"
)


def _old_model(value: str) -> list[str]:
    """`--model URL|scripted`, the upstream's old spelling, as `--upstream`; `--model NAME` as it is."""
    return ["--upstream", value] if "://" in value or value == "scripted" else ["--model", value]


RENAMED = {"--model": _old_model, "--model-name": "--model"}
"""Old spellings of the shared options, for `clikit.RenamedOptions`."""


def run_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options `run` and `rollout` share: image, model, key, preflight and logprobs modes, model settings, `--json`.

    The command receives `image`, `as_json` and `make_config`, which builds the RunnerConfig. A setting RunnerConfig
    refuses is a usage error."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def wrapper(
            *args: Any,
            image: str | None,
            agent: str | None,
            model: tuple[str, ...],
            model_name: str | None,
            api_key_env: str,
            oracle: bool,
            no_preflight: bool,
            logprobs_mode: str | None,
            expect_logprobs: str,
            agent_network: str | None,
            verifier_network: str | None,
            allowed_hosts: tuple[str, ...],
            verifier_mode: str | None,
            agent_user: str | None,
            **kwargs: Any,
        ) -> Any:
            settings = {name: kwargs.pop(name) for name in MODEL_SETTINGS}
            if image is not None and agent is not None and image != agent:
                raise click.UsageError(f"IMAGE {image!r} and --agent {agent!r} name two agents: give one of them")
            image = image or agent

            def make_config(*, build_missing: bool = True, **extra: Any) -> RunnerConfig:
                from pydantic import ValidationError

                from agentbake.gateway.model_settings import ModelSettings
                from agentbake.runner.images import resolve_image
                from agentbake.runner.runner_config import RunnerConfig

                if image is None:
                    raise click.UsageError(
                        "IMAGE (or --agent) is required: a catalog name (e.g. claude-code) or an image tag"
                    )
                if oracle and model:
                    raise click.UsageError("--oracle runs the task's reference solution with no model: drop --upstream")
                if not oracle and not model:
                    raise click.UsageError(MODEL_REQUIRED)
                try:
                    return RunnerConfig(
                        image=resolve_image(image, build_missing=build_missing),
                        model=model or None,  # RunnerConfig makes one URL a string and drops repeats
                        model_name=model_name,
                        api_key_env=api_key_env,
                        oracle=oracle,
                        preflight=not no_preflight,
                        logprobs_mode=logprobs_mode,
                        expect_logprobs=expect_logprobs,
                        agent_network=agent_network,
                        verifier_network=verifier_network,
                        allowed_hosts=tuple(h for given in allowed_hosts for h in given.split(",") if h.strip()),
                        verifier_mode=verifier_mode,
                        agent_user=agent_user,
                        model_settings=ModelSettings(**settings),
                        **extra,
                    )
                except ValidationError as exc:
                    problems = "; ".join(
                        f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors()
                    )
                    raise click.UsageError(problems) from None

            return command(*args, image=image, make_config=make_config, **kwargs)

        # The gateway's model settings (--inner-system-as-user, --disable-thinking, --temperature, ...), from
        # ModelSettings' fields (settings.MODEL_SETTINGS) as `agentbake gateway` has them.
        model_settings = {name: (s.annotation, s.default, s.help) for name, s in MODEL_SETTINGS.items()}
        decorated: Callable[..., Any] = field_options("ModelSettings", model_settings)(wrapper)
        for option in reversed(
            [
                click.argument("image", required=False),
                click.option(
                    "-a",
                    "--agent",
                    metavar="NAME",
                    help="The agent (claude-code, codex, gemini-cli, mini-swe-agent, opencode, pi, qwen-code, or an "
                    "image tag), as IMAGE names it: a task with its own image (environment/Dockerfile, docker_image) "
                    "runs in that image with this agent layered on.",
                ),
                click.option(
                    "--upstream",
                    "model",
                    multiple=True,
                    metavar="URL|scripted",
                    help="Required for an agent run: the base URL of an OpenAI-compatible server, with its /v1, or "
                    "'scripted' (the built-in model that plays each task's solution/solve.sh). Repeat it for several "
                    "workers of one model: each rollout stays on one for its whole run.",
                ),
                click.option(
                    "-m",
                    "--model",
                    "model_name",
                    metavar="NAME",
                    help="Model name sent upstream and configured in the agent.",
                ),
                click.option(
                    "--api-key-env",
                    default=UPSTREAM_API_KEY_ENV,
                    show_default=True,
                    help="Variable holding the upstream API key (e.g. OPENAI_API_KEY); only the gateway on this "
                    "host reads it, the sandbox never sees it.",
                ),
                click.option(
                    "--oracle", is_flag=True, help="Run the task's solution/solve.sh instead of an agent, no model."
                ),
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
                    default=DEFAULT_EXPECT_LOGPROBS,
                    show_default=True,
                    help="The logprobs the trainer uses; rollouts stamped otherwise are not trainable.",
                ),
                click.option(
                    "--agent-network",
                    type=click.Choice(AGENT_NETWORKS),
                    help="The agent phase's network for every task, over the task's network_mode (default: the "
                    "task's; public when it says none, as in Harbor). Through the rollout's egress proxy: public "
                    "hosts only, never this host's ports or another container; allowlist: --allowed-hosts only.",
                ),
                click.option(
                    "--verifier-network",
                    type=click.Choice(VERIFIER_NETWORKS),
                    help="The verifier phase's network for every task, as --agent-network (default: the task's), "
                    "switched once the agent is dead. bridge: the unfiltered path (a Docker bridge for "
                    "tasks whose verifier is public: this host's ports and the internet).",
                ),
                click.option(
                    "--allowed-hosts",
                    multiple=True,
                    metavar="HOST[,HOST...]",
                    help="The hosts of an allowlist override (names, *.wildcards, IPs, CIDRs); repeatable.",
                ),
                click.option(
                    "--verifier-mode",
                    type=click.Choice(VERIFIER_MODES),
                    help="Where tests/test.sh runs, for every task (default: each task's [verifier] "
                    "environment_mode). separate: a fresh sandbox of the task's image that receives only the "
                    "artifacts (the workdir by default); shared: the agent's sandbox.",
                ),
                click.option(
                    "--agent-user",
                    metavar="NAME|UID",
                    help="The user the agent (or the oracle) runs as in a task's own image, over its [agent] user; "
                    "default: the image's USER, root when it names none (as Harbor runs it). Tasks in the agent's "
                    "catalog image run as its uid 1000.",
                ),
                json_option,
            ]
        ):
            decorated = option(decorated)
        return decorated

    return decorate
