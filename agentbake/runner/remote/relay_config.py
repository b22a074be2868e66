"""`RelayConfig`: where the gateway relay listens.

It lives apart from `relay.py`, so reading a backend's config does not import the asyncio server.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RelayConfig(BaseModel):
    """Where the relay listens and the URL remote sandboxes use to reach it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    listen_host: str = "127.0.0.1"
    """Interface the relay listens on. Loopback reaches only sandboxes on this machine (tests, the fakes);
    for cloud sandboxes listen where your tunnel or load balancer forwards from (e.g. `0.0.0.0`)."""

    listen_port: int = Field(default=0, ge=0, le=65535)
    """Port (0 picks a free one)."""

    public_url: str | None = None
    """Base URL sandboxes use (an https URL in front of this port, for cloud sandboxes); default: the
    relay's own `http://listen_host:port`."""

    @classmethod
    def listening_at(cls, listen: str, public_url: str | None = None) -> RelayConfig:
        """The relay listening at `HOST:PORT` (`--relay-listen`; `[::1]:8900` for IPv6). ValueError otherwise."""
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535 or not host:
            raise ValueError(f"{listen!r}: expected HOST:PORT (a port up to 65535), e.g. 0.0.0.0:8900")
        return cls(listen_host=host.strip("[]"), listen_port=int(port), public_url=public_url)
