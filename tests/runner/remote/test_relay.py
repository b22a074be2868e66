"""The gateway relay (`--gateway host` for remote sandboxes): one TCP port, each rollout's path to its own
gateway socket; unknown rollouts get 404. A real gateway per rollout behind it, the official OpenAI SDK
in front (no Docker needed)."""

from __future__ import annotations

import resource
import selectors
import socket
import time
from pathlib import Path

import httpx
import openai
import pytest

from agentbake.gateway import GatewayConfig, create_app
from agentbake.runner.remote.relay import MAX_PER_ROLLOUT, GatewayRelay, RelayConfig, unrouted_bound
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread


def test_each_rollout_reaches_only_its_own_gateway(tmp_path: Path) -> None:
    relay = GatewayRelay(RelayConfig())
    with serve_in_thread(ScriptedModel(tasks=[])) as upstream:
        gateways = {}
        for rollout in ("a-1", "b-2"):
            uds = tmp_path / f"{rollout}.sock"
            config = GatewayConfig(
                upstream=f"{upstream.url}/v1",
                uds=uds,
                rollout_id=rollout,
                client_token=f"token-of-{rollout}-0123456789",
                trace=tmp_path / f"{rollout}.jsonl",
            )
            gateways[rollout] = serve_in_thread(create_app(config), uds=uds)
        try:
            urls = {rollout: relay.register(rollout, str(tmp_path / f"{rollout}.sock")) for rollout in gateways}
            assert urls["a-1"] == f"{relay.url}/r/a-1"
            client = openai.OpenAI(base_url=f"{urls['a-1']}/v1", api_key="token-of-a-1-0123456789", max_retries=0)
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert answer.choices[0].message is not None
            assert (tmp_path / "a-1.jsonl").read_text().count("\n") == 1
            b_trace = tmp_path / "b-2.jsonl"
            assert not b_trace.exists() or b_trace.read_text() == ""
            # b's token at a's path, and a path of no registered rollout: refused
            wrong = openai.OpenAI(base_url=f"{urls['a-1']}/v1", api_key="token-of-b-2-0123456789", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                wrong.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert httpx.get(f"{relay.url}/r/nobody/v1/models").status_code == 404
            relay.unregister("a-1")
            assert httpx.post(f"{urls['a-1']}/v1/chat/completions", json={}).status_code == 404
        finally:
            for served in gateways.values():
                served.stop()
            relay.close()


def _connect(port: int, send: bytes = b"") -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=20)
    if send:
        conn.sendall(send)
    return conn


_UNKNOWN = b"GET /r/nobody/healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def _closed(conn: socket.socket, wait: float = 20) -> bool:
    """Whether the relay closed it (end of stream) within `wait` seconds; a connection still held blocks."""
    conn.settimeout(wait)
    try:
        return conn.recv(100) == b""
    except TimeoutError:
        return False


def _any_closed(conns: list[socket.socket]) -> bool:
    """Whether any of these silent connections was closed by now (each held one has nothing to read)."""
    with selectors.DefaultSelector() as selector:  # epoll: descriptors past 1024 (the burst test's) are fine
        for conn in conns:
            selector.register(conn, selectors.EVENT_READ)
        return bool(selector.select(0.3))


def test_a_burst_of_connections_is_read_whole() -> None:
    """600 sandboxes connecting in the same instant, each sending its request line a little later: every one
    is answered (here a 404, its rollout unknown), none closed unread."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 4 * 1024  # both ends of 600 connections in this process, with room to spare
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))
    relay = GatewayRelay(RelayConfig())
    held: list[socket.socket] = []
    try:
        assert relay.max_unrouted == unrouted_bound() >= 600
        held = [_connect(relay.port) for _ in range(600)]
        time.sleep(0.5)  # the relay has accepted them all, silent
        for conn in held:
            conn.sendall(_UNKNOWN)
        answers = [conn.recv(100) for conn in held]
        assert sum(answer.startswith(b"HTTP/1.1 404") for answer in answers) == 600
    finally:
        for conn in held:
            conn.close()
        relay.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_past_the_bound_the_oldest_silent_connection_is_closed() -> None:
    """One connection more than the bound closes the oldest silent one, never the newcomer, which is read."""
    relay = GatewayRelay(RelayConfig(), max_unrouted=8)
    held: list[socket.socket] = []
    try:
        held = [_connect(relay.port) for _ in range(8)]
        time.sleep(0.5)
        assert not _any_closed(held)
        newcomer = _connect(relay.port, _UNKNOWN)
        held.append(newcomer)
        assert newcomer.recv(100).startswith(b"HTTP/1.1 404")
        assert _closed(held[0])
        assert not _any_closed(held[1:8])
        held.append(_connect(relay.port))  # silent too, the eighth held again: none goes
        time.sleep(0.5)
        assert not _any_closed(held[1:8])
        held.append(_connect(relay.port))  # the ninth: the oldest left goes
        assert _closed(held[1])
        assert not _any_closed(held[2:8] + held[9:])
    finally:
        for conn in held:
            conn.close()
        relay.close()


def test_what_one_sandbox_holds_of_the_relay_is_bounded(tmp_path: Path) -> None:
    """Silent connections past the bound close the oldest of them; one rollout's relayed connections past
    MAX_PER_ROLLOUT get 503; the relay still serves afterwards."""
    relay = GatewayRelay(RelayConfig(), max_unrouted=2 * MAX_PER_ROLLOUT)
    uds = tmp_path / "r-1.sock"
    config = GatewayConfig(upstream="http://127.0.0.1:9/v1", uds=uds, rollout_id="r-1", max_client_connections=512)
    held: list[socket.socket] = []
    try:
        with serve_in_thread(create_app(config), uds=uds, limits=config.connection_limits):
            relay.register("r-1", str(uds))
            held += [_connect(relay.port) for _ in range(relay.max_unrouted + 1)]
            time.sleep(0.5)  # the relay has accepted them all
            assert _closed(held[0]) and not _any_closed(held[1:])
            for conn in held:
                conn.close()
            held = [_connect(relay.port, b"GET /r/r-1/healthz HTTP/1.1\r\n") for _ in range(MAX_PER_ROLLOUT)]
            time.sleep(0.5)
            refused = _connect(relay.port, b"GET /r/r-1/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert refused.recv(100).startswith(b"HTTP/1.1 503")
            for conn in held:
                conn.close()
            time.sleep(0.5)
            assert httpx.get(f"{relay.url}/r/r-1/healthz").status_code == 200
    finally:
        for conn in held:
            conn.close()
        relay.close()
