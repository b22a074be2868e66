"""ASGI plumbing shared by the gateway's handlers: reading a bounded body, parsing it, answering, and
checking the client token. Raw ASGI rather than a framework: every microsecond here is added to each
model call.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from agentbake.gateway.errors import InvalidRequest, RequestTooLarge

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

JSON = b"application/json"
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def read_body(scope: Scope, receive: Receive, limit: int | None = None) -> bytes:
    """The whole request body; RequestTooLarge past `limit` bytes (None: unbounded, for loopback test servers),
    InvalidRequest when the client disconnects first."""
    for name, value in scope["headers"]:
        if limit is not None and name == b"content-length" and value.isdigit() and int(value) > limit:
            raise RequestTooLarge(f"request body of {int(value)} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def parse_json(raw: bytes) -> dict:
    if not raw:
        raise InvalidRequest("empty request body: expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("body: expected a JSON object")
    return body


def carries_token(scope: Scope, accepted: tuple[bytes, bytes]) -> bool:
    """Whether the request carries the gateway token as `x-api-key` or `Authorization: Bearer`."""
    api_key, bearer = accepted
    for name, value in scope["headers"]:
        # compare_digest: the time taken says nothing about how much of the token matched.
        if name == b"x-api-key" and hmac.compare_digest(value, api_key):
            return True
        if name == b"authorization" and hmac.compare_digest(value, bearer):
            return True
    return False


async def respond(send: Send, status: int, body: bytes, content_type: bytes = JSON, extra: list | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})
