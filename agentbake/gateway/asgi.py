"""ASGI plumbing shared by the gateway's handlers: reading a bounded body, parsing it, answering, and
checking the client token. Raw ASGI rather than a framework: every microsecond here is added to each
model call.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import orjson

from agentbake.gateway.errors import InvalidRequest, Overloaded, RequestTooLarge

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

JSON = b"application/json"
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def read_body(scope: Scope, receive: Receive, limit: int | None = None) -> bytes | bytearray:
    """The whole request body; RequestTooLarge past `limit` bytes (None: unbounded, for loopback test servers),
    InvalidRequest when the client disconnects first. A body in several chunks is gathered in one growing
    buffer (joining a list would hold it twice)."""
    for name, value in scope["headers"]:
        if limit is not None and name == b"content-length" and value.isdigit() and int(value) > limit:
            raise RequestTooLarge(f"request body of {int(value)} bytes exceeds the limit of {limit} bytes")
    body: bytes | bytearray = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        if limit is not None and len(body) + len(chunk) > limit:
            raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")
        if not body:
            body = chunk  # the usual case: the whole body in one chunk, kept as it is
        else:
            if isinstance(body, bytes):
                body = bytearray(body)
            body += chunk
        if not message.get("more_body", False):
            return body


class BodyBudget:
    """Bytes of request bodies held at once over every request in progress, at most `limit`. One per app;
    the app's requests share one event loop, so no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def receiver(self, receive: Receive) -> CountedReceive:
        """`receive` for one request, counting its body against the budget until `release()`."""
        return CountedReceive(self, receive)


class CountedReceive:
    """An ASGI `receive` whose body chunks are taken from a `BodyBudget`; Overloaded when it is spent."""

    __slots__ = ("_budget", "_receive", "held")

    def __init__(self, budget: BodyBudget, receive: Receive) -> None:
        self._budget, self._receive = budget, receive
        self.held = 0

    async def __call__(self) -> dict:
        message = await self._receive()
        size = len(message.get("body", b""))
        if size:
            budget = self._budget
            if budget.held + size > budget.limit:
                raise Overloaded(
                    f"the gateway already holds {budget.held} bytes of request bodies in progress (limit "
                    f"{budget.limit}, max_body_bytes_in_flight); retry once they are answered"
                )
            budget.held += size
            self.held += size
        return message

    def release(self) -> None:
        """Give the request's bytes back (its handler is done with the body)."""
        self._budget.held -= self.held
        self.held = 0


def parse_json(raw: bytes | bytearray) -> dict:
    if not raw:
        raise InvalidRequest("empty request body: expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("body: expected a JSON object")
    return body


def query(scope: Scope) -> dict[str, str]:
    """The request's query parameters (the last value of a repeated one)."""
    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))


def carries_token(scope: Scope, accepted: tuple[bytes, bytes]) -> bool:
    """Whether the request carries the gateway token as `x-api-key`, `Authorization: Bearer`, or as Gemini
    clients send their key: `x-goog-api-key` or `?key=`."""
    api_key, bearer = accepted
    for name, value in scope["headers"]:
        # compare_digest: the time taken says nothing about how much of the token matched.
        if name in (b"x-api-key", b"x-goog-api-key") and hmac.compare_digest(value, api_key):
            return True
        if name == b"authorization" and hmac.compare_digest(value, bearer):
            return True
    key = query(scope).get("key") if scope.get("query_string") else None
    return key is not None and hmac.compare_digest(key.encode(), api_key)


async def respond(send: Send, status: int, body: bytes, content_type: bytes = JSON, extra: list | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})
