"""What one client (a rollout's agent) can hold of its gateway: connections, idle time, request bodies in
flight. Real gateways on unix sockets; the flood comes from another process, so this process's descriptors
and memory are the gateway's alone."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson

from agentbake.gateway import GatewayConfig, create_app
from agentbake.serve import serve_in_thread
from tests.resources import Peak

MiB = 1024 * 1024


def _chat_body(size: int) -> bytes:
    """A valid chat request of exactly `size` bytes."""
    head, tail = b'{"model": "m", "messages": [{"role": "user", "content": "', b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def _post_head(path: str, token: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n\r\n"
    ).encode()


def _answer(client: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += client.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    length = int(lengths[0].split(b":")[1])
    while len(body) < length:
        body += client.recv(65536)
    return int(head.split()[1]), orjson.loads(body)


def test_bodies_past_max_body_bytes_in_flight_get_529_until_the_held_ones_are_answered(upstream, tmp_path):
    token = secrets.token_urlsafe(24)
    uds = tmp_path / "gw.sock"
    config = GatewayConfig(
        upstream=upstream.url + "/v1", client_token=token, uds=uds, max_body_bytes=MiB, max_body_bytes_in_flight=MiB
    )
    app = create_app(config)
    with serve_in_thread(app, uds=uds, limits=config.connection_limits, log_level="critical") as served:
        held = socket.socket(socket.AF_UNIX)
        held.settimeout(20)
        held.connect(str(uds))
        body = _chat_body(900 * 1024)
        held.sendall(_post_head("/v1/chat/completions", token, len(body)) + body[:-10])  # held, not finished
        deadline = time.monotonic() + 20
        while app.bodies.held < 800 * 1024:
            assert time.monotonic() < deadline, "the gateway never read the held body"
            time.sleep(0.01)
        second = _chat_body(300 * 1024)
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(uds)), base_url=served.url) as client:
            refused = client.post("/v1/messages", content=second, headers={"x-api-key": token})
            assert refused.status_code == 529 and refused.json()["error"]["type"] == "overloaded_error"
            assert "max_body_bytes_in_flight" in refused.json()["error"]["message"]
            held.sendall(body[-10:])
            status, answer = _answer(held)
            assert status == 200 and answer["choices"][0]["message"]["content"]
            assert app.bodies.held == 0  # given back when the request ended
            again = client.post("/v1/chat/completions", content=second, headers={"x-api-key": token})
            assert again.status_code == 200
        held.close()


_FLOOD = r"""
import socket, sys
uds, token, bodies, idle = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
size = 60 << 20
head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\n"
        f"content-type: application/json\r\ncontent-length: {size}\r\n\r\n").encode()
held = []
for _ in range(bodies):  # each sends all of its 60 MiB body but the last byte, then holds
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    try:
        s.connect(uds)
        s.sendall(head + b"x" * (size - 1))
    except OSError:
        pass
    held.append(s)
for _ in range(idle):  # and never send anything on these
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(uds)
    except OSError:
        pass
    held.append(s)
print("holding", flush=True)
sys.stdin.readline()
"""


def test_a_flood_of_idle_connections_and_big_bodies_holds_bounded_descriptors_and_memory(tmp_path):
    """The memory attack: 12 concurrent 60 MiB requests (~890 MB of the runner without the limits) and 600 idle
    connections (once ~510 descriptors), from one agent. Nothing upstream: the bodies are what is measured."""
    token = secrets.token_urlsafe(24)
    uds = tmp_path / "gw.sock"
    config = GatewayConfig(upstream="http://127.0.0.1:9/v1", client_token=token, uds=uds)  # defaults otherwise
    with serve_in_thread(create_app(config), uds=uds, limits=config.connection_limits, log_level="critical") as served:
        with Peak() as peak:
            flood = subprocess.Popen(
                [sys.executable, "-c", _FLOOD, str(uds), token, "12", "600"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert flood.stdout is not None and flood.stdout.readline().strip() == "holding"
                time.sleep(0.5)  # what the gateway holds now, sampled
            finally:
                flood.communicate("\n", timeout=60)
        print(f"\nflood: +{peak.added_mib:.0f} MiB resident (peak), +{peak.added_fds} descriptors (peak)")
        assert peak.added_fds <= config.max_client_connections + 8
        # 128 MiB of bodies in flight at most (max_body_bytes_in_flight), with room for the allocator.
        assert peak.added_mib < 400
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(uds)), base_url=served.url) as client:
            assert client.get("/healthz").status_code == 200
    assert Path(uds).exists() is False


def test_a_trace_past_max_trace_bytes_takes_no_more_calls(make_gateway, upstream):
    """Every record holds the request as sent: without a cap, an agent looping on big requests fills the disk."""
    gw = make_gateway(max_trace_bytes=8192)
    request = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}
    statuses = []
    with httpx.Client(base_url=gw.url) as client:
        while len(statuses) < 50 and 413 not in statuses:
            statuses.append(client.post("/v1/chat/completions", json=request).status_code)
        size = gw.trace.stat().st_size
        refused = client.post("/v1/messages", json={**request, "max_tokens": 5})
    assert statuses[0] == 200 and statuses[-1] == 413 and set(statuses[:-1]) == {200}, statuses
    assert size >= 8192 and len(gw.records()) == len(statuses) - 1
    assert refused.status_code == 413 and refused.json()["error"]["type"] == "request_too_large"
    assert "max_trace_bytes = 8192" in refused.json()["error"]["message"]
    assert gw.trace.stat().st_size == size  # nothing more recorded
