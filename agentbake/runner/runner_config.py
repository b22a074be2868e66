"""What a `Runner` is told: image, model, where results go. One pydantic model, every field documented."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentbake.gateway.model_settings import ModelSettings
from agentbake.gateway.settings import UPSTREAM_API_KEY_ENV, LogprobsMode
from agentbake.runner.choices import (
    DEFAULT_EXPECT_LOGPROBS,
    DEFAULT_GATEWAY,
    GatewayPlace,
    PhaseNetwork,
    VerifierMode,
    VerifierNetwork,
)

SCRIPTED = "scripted"
"""`model` value that serves agentbake's scripted model in-process (plays each task's solve.sh)."""
SCRIPTED_MODEL_NAME = "scripted"
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


class RunnerConfig(BaseModel):
    """Settings shared by every rollout of a runner (a batch, or a trainer's whole run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str
    """Image reference the sandboxes run: a content-hash tag such as `agentbake/claude-code:<hash12>`."""

    model: str | tuple[str, ...] | None = None
    """`scripted`, or the base URL of an OpenAI-compatible server including its `/v1`, or several such URLs. Several
    URLs are workers of one model: each rollout stays on one, and a failed worker's rollouts end as `model_error`. None
    only with `oracle`."""

    model_name: str | None = None
    """Model name sent upstream on every call (the gateway's model override) and configured in the agent.
    None takes the first model the upstream lists at `/models` (`scripted` with the scripted model)."""

    api_key_env: str = UPSTREAM_API_KEY_ENV
    """Variable of THIS process's environment holding the upstream API key; the gateway on the host reads
    it. It never reaches the sandbox, which holds only a per-rollout token."""

    oracle: bool = False
    """Run the task's `solution/solve.sh` instead of an agent, with no model (checks that a task is solvable)."""

    out_dir: Path = Path("out")
    """Each rollout writes `out_dir/<rollout_id>/` (result.json, trace.jsonl, logs, workdir.diff)."""

    cpus: float | None = Field(default=None, gt=0)
    """CPU limit per sandbox, over the task's `[environment] cpus`; None takes the task's (or the backend's)."""

    memory_mb: int | None = Field(default=None, ge=16)
    """Memory limit per sandbox (MiB), over the task's `[environment] memory_mb`."""

    storage_mb: int | None = Field(default=None, ge=16)
    """Disk limit of each sandbox's own files (MiB), over the task's `[environment] storage_mb`; None takes the
    task's, else the backend's (Docker: 10240). Past it the agent is stopped: status `disk_limit`."""

    warm: int = Field(default=0, ge=0, exclude=True)
    """Deprecated: the warm pool is the Docker backend's own setting, `DockerConfig.warm` (CLI `--warm`). Still
    honoured when the Runner is given no backend (it builds `DockerConfig(warm=warm)`); a backend given with
    another warm pool is a ConfigError. Left out of dumps (a job's config.json holds `backend.config.warm`)."""

    agent_user: str | None = None
    """The user the agent and the oracle run as in a task's own image (a name or uid of its /etc/passwd), over
    every task's `[agent] user`. None: the task's key, else the image's own USER, root when it names none (as
    Harbor runs a task). A task in the agent's catalog image runs as that image's user (uid 1000): another one
    is refused for it. CLI: `--agent-user`."""

    agent_network: PhaseNetwork | None = None
    """The agent phase's network for every task of the run, over the task's own (`Task.agent_network`: its
    `[agent]` / `[environment]` `network_mode`, Harbor's public when it says none). None keeps the task's.
    `none`: nothing but the gateway; `allowlist`: only `allowed_hosts`; `public`: any public host. On Docker
    every mode goes through the rollout's egress proxy (agentbake.egress): never this host's ports, another
    container or a private range unless listed by address."""

    verifier_network: VerifierNetwork | None = None
    """The verifier phase's network for every task, over `Task.verifier_network`, as `agent_network`; the proxy switches
    to it once the agent is dead. `bridge` is the unfiltered path: a task whose verifier policy is public gets a Docker
    bridge network once the agent is dead, the others none."""

    allowed_hosts: tuple[str, ...] = ()
    """The hosts of an `allowlist` override (either phase), in `allowed_hosts`' forms: names, `*.` wildcards,
    IP addresses, CIDRs. Given without an `allowlist` override it is refused."""

    verifier_mode: VerifierMode | None = None
    """Where `tests/test.sh` runs, forced for every task: `separate`, a fresh sandbox that receives only the task's
    `artifacts`; `shared`, the agent's sandbox. None: each task's `[verifier] environment_mode`. Separate mode needs a
    backend with `Capabilities.verifier_sandbox` (Docker)."""

    gateway: GatewayPlace = DEFAULT_GATEWAY
    """`host`: each rollout's gateway runs in this process and the sandbox holds only a per-rollout token.
    `sandbox` (remote backends): it runs inside the sandbox from the image's baked venv, calling `model`
    directly with the key from `api_key_env` (docs/remote.md)."""

    preflight: bool = True
    """Probe the model server once before the first rollout, as every gateway will call it (`agentbake preflight`).
    Refuses to start when answers cannot be captured, and learns whether logprobs are raw or processed. False for runs
    that need no capture. Skipped with `gateway="sandbox"`."""

    logprobs_mode: LogprobsMode | None = None
    """What the server's logprobs are (vLLM `--logprobs-mode raw_logprobs|processed_logprobs`), stamped on
    every trace record. None takes what the preflight finds; a preflight that finds the other refuses to
    start, naming both fixes."""

    expect_logprobs: LogprobsMode = DEFAULT_EXPECT_LOGPROBS
    """The logprobs the trainer computes its ratios with: a rollout whose records are stamped with the other
    mode is not `trainable` (`out/<id>/sequences.json`, `RolloutResult.trainable`)."""

    model_settings: ModelSettings = ModelSettings()
    """What every rollout's gateway changes in the agent's requests: chat-template switches and the sampling set on
    every call (a trainer's). CLI: `--inner-system-as-user`, `--disable-thinking`, `--temperature`, ..."""

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        from agentbake.errors import TaskError
        from agentbake.tasks.task_network import host_entry

        try:
            return tuple(dict.fromkeys(host_entry(host, "allowed_hosts") for host in hosts))
        except TaskError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _hosts_need_an_allowlist(self) -> RunnerConfig:
        if self.allowed_hosts and "allowlist" not in (self.agent_network, self.verifier_network):
            raise ValueError(
                "allowed_hosts is for an allowlist override: set agent_network or verifier_network to 'allowlist' "
                "(--agent-network / --verifier-network allowlist), or drop it"
            )
        return self

    @model_validator(mode="after")
    def _token_in_needs_the_host_gateway(self) -> RunnerConfig:
        settings = self.model_settings
        if self.gateway == "sandbox" and (settings.tokenizer is not None or settings.token_in):
            field = "tokenizer" if settings.tokenizer is not None else "token_in"
            raise ValueError(
                f"model_settings.{field}: token-in needs the gateway on this host (it renders with `transformers`, "
                "which the image's baked gateway venv lacks): use gateway='host' (--gateway host), or drop "
                f"--{field.replace('_', '-')}"
            )
        return self

    @field_validator("agent_user")
    @classmethod
    def _user_name_or_uid(cls, user: str | None) -> str | None:
        if user is not None and not _USER.fullmatch(user):
            raise ValueError(
                f"{user!r}: expected a user name or a uid of the task image's /etc/passwd (letters, digits, _ . -; "
                "e.g. root, 1000, www-data)"
            )
        return user

    @model_validator(mode="after")
    def _model_or_oracle(self) -> RunnerConfig:
        if self.oracle and self.model is not None:
            raise ValueError("oracle runs the reference solution with no model: drop the model")
        if not self.oracle and self.model is None:
            raise ValueError(
                "no model: pass model='scripted' or an OpenAI-compatible URL ending in /v1, or oracle=True"
            )
        urls = self.model if isinstance(self.model, tuple) else (self.model,)
        for url in urls:
            if url not in (None, SCRIPTED) and not url.startswith(("http://", "https://")):
                raise ValueError(f"model {url!r}: expected 'scripted' or an http(s):// URL ending in /v1")
            if isinstance(self.model, tuple) and url == SCRIPTED:
                raise ValueError("model: 'scripted' is served here, once; several models must all be http(s):// URLs")
        if self.warm:
            warnings.warn(
                "RunnerConfig.warm is deprecated: the warm pool is the Docker backend's own setting; pass "
                f"DockerConfig(warm={self.warm}) as the Runner's backend",
                DeprecationWarning,
                stacklevel=2,
            )
        return self

    @field_validator("model", mode="before")
    @classmethod
    def _one_url_is_a_string(cls, model: object) -> object:
        if isinstance(model, list | tuple):
            urls = tuple(dict.fromkeys(model))
            if not urls:
                raise ValueError("model: an empty list; give 'scripted' or one or more http(s):// URLs")
            return urls[0] if len(urls) == 1 else urls
        return model

    @property
    def upstream_urls(self) -> tuple[str, ...]:
        """The upstream workers' base URLs; empty for `scripted` (served later) and the oracle."""
        if isinstance(self.model, tuple):
            return tuple(url.rstrip("/") for url in self.model)
        return () if self.model in (None, SCRIPTED) else (self.model.rstrip("/"),)
