"""Gateway settings: one pydantic model, filled from the command line or by a caller."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator

from agentbake.errors import ConfigError
from agentbake.gateway.model_settings import ModelSettings
from agentbake.gateway.settings import LOGPROBS_MODES as LOGPROBS_MODES  # re-exported: importers name config
from agentbake.gateway.settings import SAMPLING_FIELDS as SAMPLING_FIELDS
from agentbake.gateway.settings import UPSTREAM_API_KEY_ENV, LogprobsMode
from agentbake.serve import ConnectionLimits

# What a rollout id may look like, in a `/r/<id>/` path or in `rollout_id`.
ROLLOUT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class GatewayConfig(ModelSettings):
    """Everything `agentbake gateway` can be told; `create_app(GatewayConfig(...))` takes the same."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    upstream: str
    """Base URL of the OpenAI-compatible server, including its `/v1` (e.g. `http://127.0.0.1:8000/v1`)."""

    host: str = "127.0.0.1"
    """Interface to listen on. Loopback by default: without `client_token`, anyone who reaches the port
    can use the upstream through it."""

    port: int = Field(default=8080, ge=0, le=65535)
    """TCP port to listen on (0 picks a free one)."""

    uds: Path | None = None
    """Unix socket to listen on instead of `host`/`port` (mode 0o666, so a sandbox's user reaches it
    through a bind mount; its folder must be traversable by that user too)."""

    rollout_id: str | None = None
    """Serve this one rollout only: every record is tagged with it, and a path naming another rollout gets 403. None
    serves any `/r/<id>/` (and untagged paths)."""

    client_token: SecretStr | None = None
    """Credential every request must carry, as `x-api-key` or `Authorization: Bearer`, else 401
    (`/healthz` stays open). Meant per rollout: the agent holds this instead of the upstream key, and it is
    worthless anywhere but this gateway. Never logged nor traced; shown masked in the config's repr."""

    trace: Path | None = None
    """JSONL file receiving one record per upstream call, appended as each call ends; None records nothing."""

    api_key_env: str = UPSTREAM_API_KEY_ENV
    """Environment variable holding the upstream API key. Never argv: keys there show in `ps`."""

    api_key_file: Path | None = None
    """File holding the upstream API key; wins over `api_key_env` when set."""

    model_override: str | None = None
    """Model name sent upstream on every request, whatever the client asked for (Claude Code asks for
    a Claude model)."""

    max_tokens_cap: int | None = Field(default=8192, ge=1)
    """Upper bound for `max_tokens` / `max_completion_tokens`; Claude Code asks for 32000-128000, which
    overflows small contexts. None (or 0) forwards the client's value unchanged."""

    max_completion_tokens_models: tuple[str, ...] = ("o1*", "o3*", "o4*", "gpt-5*")
    """Glob patterns of upstream model names that reject `max_tokens`; for them it is renamed
    `max_completion_tokens`."""

    drop_billing_header: bool = True
    """Drop Claude Code's `x-anthropic-billing-header: ...` system block: it is noise for the model and it
    changes every call, which defeats prefix caching."""

    capture_logprobs: bool = True
    """Inject `logprobs: true` / `top_logprobs` so every completion token's logprob is recorded."""

    top_logprobs: int = Field(default=1, ge=0, le=20)
    """`top_logprobs` injected when the client did not set it."""

    tokens_as_token_ids: bool = True
    """Ask vLLM for `return_tokens_as_token_ids` so logprob entries carry `"token_id:<int>"`. Turned off for
    a client that asked for logprobs itself, so its token strings stay text."""

    request_token_ids: bool = True
    """Ask vLLM for `return_token_ids` (prompt token ids and per-choice completion ids). Disable for
    upstreams that reject unknown request fields."""

    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Largest client request body accepted; larger ones get 413. Big tool results make Claude Code
    requests large, so the default is generous (64 MiB)."""

    max_body_bytes_in_flight: int = Field(default=128 * 1024 * 1024, ge=1024)
    """Bytes of request bodies held at once over all requests in progress; a request whose body would pass
    it gets 529 (overloaded: clients retry later). Bounds the gateway's memory whatever a client sends
    concurrently (many requests just under `max_body_bytes`)."""

    max_trace_bytes: int | None = Field(default=None, ge=1024)
    """Once the trace file holds this many bytes, model calls are refused (413, which clients do not retry). Each record
    holds its request, so a looping client would otherwise fill the disk. None: no bound."""

    max_client_connections: int = Field(default=64, ge=1)
    """Client connections open at once; one more is closed as it arrives. A rollout's gateway serves one
    agent: this bounds the file descriptors the agent can hold in the runner."""

    client_idle_timeout_s: float = Field(default=60.0, gt=0)
    """Seconds a client connection may take to send a whole request (from its opening or its previous
    answer); then it is closed. The answer itself may take as long as the upstream does."""

    connect_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds to open a connection to the upstream before answering 529 (unavailable)."""

    read_timeout_s: float = Field(default=600.0, gt=0)
    """Seconds without a byte from the upstream before the call fails (Claude Code waits 600 s)."""

    max_connections: int = Field(default=512, ge=1)
    """Size of the shared upstream connection pool."""

    upstream_ca_file: Path | None = None
    """PEM file of the certificate authorities an `https://` upstream's certificate is checked against,
    instead of the system's (a private CA, a self-signed server). Without it the system store is used, and
    OpenSSL's `SSL_CERT_FILE` / `SSL_CERT_DIR` environment variables override that store as usual."""

    preflight: bool = False
    """Before serving, probe the upstream once (`agentbake preflight`) and refuse to start unless its answers can be
    captured; the report goes to the log."""

    logprobs_mode: LogprobsMode | None = None
    """What the upstream's logprobs are, as vLLM's `--logprobs-mode` names them: "raw" (the policy's, before
    temperature and top-p) or "processed" (after them). Every trace record carries it, so an export can refuse
    a mismatch with what the trainer expects; None (unknown) when not given."""

    tokenize_url: str | None = None
    """vLLM's `/tokenize` endpoint for exact `count_tokens`; defaults to `upstream` without its `/v1`."""

    worker: str | None = None
    """Which upstream worker this gateway calls, written on every record (a runner with several workers of one
    model names the one each rollout is pinned to); None writes nothing."""

    policy_version: int | None = None
    """The policy (weights) version the upstream serves, written on every record; a trainer moves it between
    steps (`PUT /policy_version` with the admin token, or the runner's `set_policy_version`)."""

    admin_token_env: str | None = None
    """Environment variable holding the token that `PUT /policy_version` must carry (`Authorization: Bearer`);
    unset, the route does not exist. Never the client token: the agent must not set what its records say."""

    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "warning"
    """uvicorn log level; request bodies and keys are never logged."""

    @field_validator("max_tokens_cap", mode="before")
    @classmethod
    def _zero_is_no_cap(cls, value: object) -> object:
        return None if value == 0 else value

    @field_validator("rollout_id")
    @classmethod
    def _check_rollout_id(cls, value: str | None) -> str | None:
        if value is not None and not ROLLOUT_ID.fullmatch(value):
            raise ValueError(f"invalid rollout id {value!r}: use 1-128 of [A-Za-z0-9._:-]")
        return value

    @field_validator("client_token")
    @classmethod
    def _check_client_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("client_token must be at least 16 characters (use secrets.token_urlsafe())")
        return value

    @field_validator("upstream")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("upstream must be an http:// or https:// URL")
        return value.rstrip("/")

    @property
    def connection_limits(self) -> ConnectionLimits:
        """What the server in front of the gateway allows its clients (`agentbake.serve`)."""
        return ConnectionLimits(max_connections=self.max_client_connections, idle_timeout_s=self.client_idle_timeout_s)

    @property
    def resolved_tokenize_url(self) -> str:
        if self.tokenize_url:
            return self.tokenize_url
        base = self.upstream.removesuffix("/v1")
        return f"{base}/tokenize"

    def read_api_key(self) -> str | None:
        """The upstream key from `api_key_file` or `api_key_env`, or None when neither holds one."""
        if self.api_key_file is not None:
            try:
                key = self.api_key_file.read_text().strip()
            except OSError as exc:
                raise ConfigError(f"cannot read api_key_file {self.api_key_file}: {exc.strerror}") from exc
            if not key:
                raise ConfigError(f"api_key_file {self.api_key_file} is empty")
            return key
        return os.environ.get(self.api_key_env) or None
