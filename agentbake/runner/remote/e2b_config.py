"""Settings of the E2B backend: one pydantic model; `E2BBackend(E2BConfig(...))` takes it.

The SDK reads `E2B_API_KEY` (and `E2B_API_URL`, `E2B_DOMAIN`) from the environment; nothing here holds it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agentbake.runner.remote.relay_config import RelayConfig


class E2BConfig(BaseModel):
    """How the E2B backend creates sandboxes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    template: str | None = None
    """Template `name:tag` to start instead of the published manifest's entry for the image's content hash.
    Must carry a tag other than `latest` (a moving tag could start a different image than the one tested)."""

    manifest: Path | None = None
    """The published manifest (`agentbake publish` writes it); default $AGENTBAKE_PUBLISHED, else ./published.json."""

    sandbox_timeout_s: int = Field(default=3600, ge=60)
    """Lifetime E2B gives the sandbox before it kills it itself: the backstop when this process dies without
    killing it. Longer than the task's agent + verifier timeouts."""

    create_attempts: int = Field(default=4, ge=1)
    """Tries of `create` when E2B fails transiently (rate limits, 5xx, connection errors)."""

    retry_backoff_s: float = Field(default=0.5, ge=0)
    """Wait before the second try; doubled before each further one."""

    request_timeout_s: float = Field(default=60, gt=0)
    """Timeout of one control-plane or file request (commands are bounded by their own timeout)."""

    relay: RelayConfig = RelayConfig()
    """`--gateway host`: where this machine's gateway relay listens and the URL sandboxes reach it at;
    each rollout's model_url is `<url>/r/<rollout_id>`."""
