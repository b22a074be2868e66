"""The gateway's fixtures (a real scripted upstream, real gateways on loopback, the Claude Code CLI), for traces
to export."""

from tests.gateway.conftest import _upstream_server, claude_bin, make_gateway, upstream  # noqa: F401
