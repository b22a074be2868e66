"""The pooled upstream client against hand-written HTTP servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from agentbake.gateway.errors import UpstreamError
from agentbake.gateway.upstream import UpstreamClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head + await reader.readexactly(length)


def run_against(handler: Handler, scenario: Callable[[UpstreamClient, list], Awaitable[None]], **settings) -> list:
    """Serve `handler` (called per request with the connection's request number; returning False
    closes the connection) and run `scenario` with a client for it. Returns the per-connection log."""
    connections: list[list[bytes]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        log: list[bytes] = []
        connections.append(log)
        try:
            while True:
                log.append(await _read_request(reader))
                if not await handler(reader, writer, len(log)):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        options = {"connect_timeout": 1.0, "read_timeout": 1.0, "max_connections": 4, **settings}
        client = UpstreamClient(f"http://127.0.0.1:{port}/v1", headers={"authorization": "Bearer k"}, **options)
        try:
            await scenario(client, connections)
        finally:
            await client.aclose()
            server.close()

    asyncio.run(main())
    return connections


def test_keep_alive_reuses_one_connection_and_sends_headers():
    async def handler(reader, writer, n):
        writer.write(OK)
        return True

    async def scenario(client, _):
        for _ in range(3):
            response = await client.request("POST", "/chat/completions", b"{}")
            assert response.status == 200 and await response.read() == b"ok"
            response.close()

    (only,) = run_against(handler, scenario)
    assert len(only) == 3
    assert only[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer k\r\n")


def test_a_reused_connection_closed_by_the_server_is_retried_once_on_a_new_one():
    async def handler(reader, writer, n):
        if n == 2:
            return False  # the server drops the idle connection just as it is reused
        writer.write(OK)
        return True

    async def scenario(client, _):
        for _ in range(2):
            response = await client.request("POST", "/x", b"{}")
            assert await response.read() == b"ok"
            response.close()

    assert [len(c) for c in run_against(handler, scenario)] == [2, 1]


def test_chunked_bodies_arrive_chunk_by_chunk():
    async def handler(reader, writer, n):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        return True

    async def scenario(client, _):
        chunked = await client.request("POST", "/x", b"{}")
        assert [c async for c in chunked.iter_raw()] == [b"abc", b"de"]
        chunked.close()

    run_against(handler, scenario)


def test_a_second_unrequested_response_is_not_mixed_in_and_the_connection_is_dropped():
    async def handler(reader, writer, n):
        writer.write(OK + b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nextra")
        return True

    async def scenario(client, _):
        for _ in range(2):
            response = await client.request("POST", "/x", b"{}")
            assert (response.status, await response.read()) == (200, b"ok")
            response.close()

    assert [len(c) for c in run_against(handler, scenario)] == [1, 1]


def test_body_delimited_by_connection_close():
    async def eof_handler(reader, writer, n):
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil-eof")
        return False

    async def eof_scenario(client, _):
        response = await client.request("GET", "/models")
        assert await response.read() == b"until-eof"
        response.close()

    run_against(eof_handler, eof_scenario)


@pytest.mark.parametrize(
    ("reply", "status", "message"),
    [
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n", 504, "timed out"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
            502,
            "connection closed before the response ended",
        ),
        (b"NOT HTTP AT ALL\r\n\r\n", 502, "malformed HTTP response"),
    ],
)
def test_broken_answers_raise_upstream_errors(reply, status, message):
    async def handler(reader, writer, n):
        writer.write(reply)
        await writer.drain()
        if status == 504:
            await asyncio.sleep(1.0)  # silent, connection open
        return False

    async def scenario(client, _):
        with pytest.raises(UpstreamError) as caught:
            response = await client.request("POST", "/x", b"{}")
            await response.read()
        assert caught.value.status == status and message in caught.value.message

    run_against(handler, scenario, read_timeout=0.2)


def test_a_full_pool_and_a_refused_connection_are_529():
    async def handler(reader, writer, n):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n")
        await asyncio.sleep(0.5)
        return False

    async def scenario(client, _):
        held = await client.request("POST", "/x", b"{}")
        with pytest.raises(UpstreamError) as caught:
            await client.request("POST", "/x", b"{}")
        assert caught.value.status == 529 and "busy" in caught.value.message
        held.close()
        refused = UpstreamClient(
            "http://127.0.0.1:9/v1", headers={}, connect_timeout=1.0, read_timeout=1.0, max_connections=1
        )
        with pytest.raises(UpstreamError) as caught:
            await refused.request("GET", "/models")
        assert caught.value.status == 529 and "cannot connect to 127.0.0.1:9" in caught.value.message

    run_against(handler, scenario, max_connections=1, connect_timeout=0.2)
