"""The gateway's fixtures (a real scripted upstream and real gateways on loopback), for traces to export."""

from tests.gateway.conftest import _upstream_server, make_gateway, upstream  # noqa: F401
