"""Settings of the egress proxies and their shared cache: one pydantic model."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.user_cache import user_cache_dir

MiB = 1024 * 1024


def default_cache_dir() -> Path:
    """`<user cache>/egress`, else a folder of this user's under the temp dir."""
    import os
    import tempfile

    root = user_cache_dir()
    return root / "egress" if root is not None else Path(tempfile.gettempdir()) / f"agentbake-{os.getuid()}" / "egress"


class EgressConfig(BaseModel):
    """How the egress proxies run, what they may hold, and where their cache lives."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cache_dir: Path = Field(default_factory=default_cache_dir)
    """The cache's folder (made mode 0700). It must never be mounted into a sandbox."""

    cache_max_bytes: int = Field(default=20 * 1024 * MiB, ge=0)
    """Bound on the cache's blobs; a fill past it evicts the least recently used entries down to 90 %."""

    max_cached_object_bytes: int = Field(default=2048 * MiB, ge=0)
    """Answers larger than this go through uncached."""

    max_index_bytes: int = Field(default=256 * MiB, ge=0)
    """Largest index a mirror route rewrites (it is read whole: a PyPI project page, an npm packument)."""

    index_ttl_s: float = Field(default=600.0, ge=0)
    """How long an index (apt's InRelease and Packages, a PyPI project page, an npm packument) is served from
    the cache before it is fetched again. Files named by their digest or version are kept until evicted."""

    ca_file: Path | None = Field(default_factory=detect_ca_bundle)
    """Extra CA bundle for upstream TLS (an intercepting proxy's), found like the build kit's by default."""

    pypi_index: str = "https://pypi.org/simple"
    """Upstream of the `/pypi/simple/` mirror route."""

    pypi_files: str = "https://files.pythonhosted.org"
    """Upstream of the `/pypi/files/` route: where the index's file links point."""

    npm_registry: str = "https://registry.npmjs.org"
    """Upstream of the `/npm/` mirror route."""

    max_connections: int = Field(default=64, ge=1)
    """Open client connections per proxy; one more is closed as it arrives."""

    max_head_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest request or response head (request line or status line and every header)."""

    max_headers: int = Field(default=100, ge=1)
    """Most header fields in one head."""

    idle_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds a client connection or a tunnel may stay silent (both ways) before it is closed."""

    upstream_timeout_s: float = Field(default=30.0, gt=0)
    """Seconds to resolve, connect, or wait for the next bytes of an upstream."""

    max_request_body_bytes: int = Field(default=16 * MiB, ge=0)
    """Largest request body a client may send (Content-Length framing only; it is read whole before it is
    forwarded, so this times `max_connections` bounds the memory one sandbox can make the proxy hold)."""

    max_phase_bytes: int = Field(default=32 * 1024 * MiB, ge=0)
    """Bytes one proxy moves (both ways, tunnels included) until its policy is next switched; past it every
    request is refused."""

    max_logged_refusals: int = Field(default=1000, ge=0)
    """Per phase, of refusals and of upstream failures each: the hosts counted by name (later ones are counted
    together as `(other hosts)`) and the lines written to the proxy's log (later ones are counted only)."""
