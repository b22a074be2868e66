"""Settings of the Hugging Face backend: one pydantic model; `HFBackend(HFConfig(...))` takes it.

The SDK reads the Hub token (`HF_TOKEN`, or `hf auth login`) and `HF_ENDPOINT`; nothing here holds them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agentbake.runner.remote.relay_config import RelayConfig


class HFConfig(BaseModel):
    """How the Hugging Face backend creates sandboxes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str | None = None
    """Image reference to start instead of the published manifest's `hf_image` for the image's content
    hash: a registry reference with the content-hash tag or a digest (never `latest`), or `hf.co/spaces/NS/NAME`."""

    manifest: Path | None = None
    """The published manifest (`agentbake publish` writes it); default $AGENTBAKE_PUBLISHED, else ./published.json."""

    flavor: str = "cpu-basic"
    """Hardware flavor (`hf jobs hardware` lists them)."""

    namespace: str | None = None
    """User or organisation the sandboxes run under (default: the token's user)."""

    idle_timeout_s: int = Field(default=900, ge=60)
    """Seconds without API calls or running processes after which the sandbox ends itself: the backstop
    when this process dies without killing it."""

    start_timeout_s: float = Field(default=180, gt=0)
    """Seconds a new sandbox may take to accept commands."""

    create_attempts: int = Field(default=3, ge=1)
    """Tries of `create` when the Hub fails transiently (rate limits, 5xx, connection errors)."""

    retry_backoff_s: float = Field(default=1.0, ge=0)
    """Wait before the second try; doubled before each further one."""

    poll_interval_s: float = Field(default=0.25, gt=0)
    """How often a background job's state is asked for (`processes()`) while the harness waits for it."""

    scrubbed_env: tuple[str, ...] = ("SBX_TOKEN", "SBX_PORT", "SBX_IDLE_TIMEOUT", "HF_TOKEN")
    """Variables removed from the environment of every command that runs as the image's user: the sandbox
    server's credential (its commands inherit its environment) and anything that could reach the Hub."""

    relay: RelayConfig = RelayConfig()
    """`--gateway host`: where this machine's gateway relay listens and the URL sandboxes reach it at;
    each rollout's model_url is `<url>/r/<rollout_id>`."""
