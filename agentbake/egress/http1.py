"""Just enough HTTP/1.1 for a forward proxy, strict and bounded: heads, framing, hop-by-hop headers.

Both sides are hostile, so heads are size-capped, ambiguous framing is refused, and bodies are streamed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TypeVar

Headers = list[tuple[str, str]]
T = TypeVar("T")

CHUNK = 65536
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class HttpError(Exception):
    """A message the proxy will not handle: answered with `status` and this text, then the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class UpstreamFailure(HttpError):
    """An upstream the policy allows that could not be reached or broke off its answer: `host` and `reason`, a short
    cause (`connection refused`, `no answer in 30 s`), are what the proxy counts."""

    def __init__(self, status: int, message: str, host: str, reason: str) -> None:
        super().__init__(status, message)
        self.host = host
        self.reason = reason


CLOSED = "upstream closed the connection"


def no_answer(timeout: float) -> str:
    """The cause of an upstream that stayed silent past the proxy's timeout."""
    return f"no answer in {timeout:g} s"


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    version: str
    headers: Headers


@dataclass(frozen=True)
class Response:
    version: str
    status: int
    reason: str
    headers: Headers


async def within(awaitable: Awaitable[T], timeout: float) -> T:
    """`await awaitable` under a deadline (TimeoutError). Unlike `asyncio.wait_for` on Python 3.11, a cancellation
    that arrives as the awaitable completes is never swallowed (a phase switch must end every connection)."""
    async with asyncio.timeout(timeout):
        return await awaitable


def header(headers: Headers, name: str) -> str | None:
    """The first value of `name` (case-insensitive), or None."""
    name = name.lower()
    return next((value for key, value in headers if key.lower() == name), None)


def end_to_end(headers: Headers, *, drop: frozenset[str] = frozenset()) -> Headers:
    """`headers` without the hop-by-hop ones (those named in Connection too) and without `drop` (lower case)."""
    named = {
        token.strip().lower() for key, value in headers if key.lower() == "connection" for token in value.split(",")
    }
    gone = HOP_BY_HOP | named | drop
    return [(key, value) for key, value in headers if key.lower() not in gone]


async def read_head(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """The bytes of one message head up to its blank line, or None when the peer closed before sending one.
    The reader's own limit caps its size (413); `timeout` bounds the wait (408)."""
    try:
        return await within(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise HttpError(400, "the message head ended before its blank line") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "the message head is too large") from exc
    except TimeoutError as exc:
        raise HttpError(408, "no complete request in time") from exc


def _parse_headers(lines: list[str], max_headers: int) -> Headers:
    if len(lines) > max_headers:
        raise HttpError(431, f"more than {max_headers} header fields")
    headers: Headers = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name):
            raise HttpError(400, f"malformed header field {line[:80]!r}")
        value = value.strip(" \t")
        if _BAD_VALUE.search(value):
            raise HttpError(400, f"control characters in header {name}")
        headers.append((name, value))
    return headers


def parse_request(head: bytes, max_headers: int) -> Request:
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ") if lines else []
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(400, "malformed request line")
    return Request(parts[0], parts[1], parts[2], _parse_headers(lines[1:], max_headers))


def parse_response(head: bytes, max_headers: int) -> Response:
    lines = head.decode("latin-1").split("\r\n")[:-2]
    version, _, rest = (lines[0] if lines else "").partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or not (code.isdigit() and len(code) == 3):
        raise HttpError(502, "the upstream sent a malformed status line")
    return Response(version, int(code), reason, _parse_headers(lines[1:], max_headers))


def content_length(headers: Headers) -> int | None:
    """The one Content-Length, or None; two differing values or a non-number are refused."""
    values = {value.strip() for key, value in headers if key.lower() == "content-length"}
    if not values:
        return None
    if len(values) > 1 or not next(iter(values)).isdigit():
        raise HttpError(400, "invalid Content-Length")
    return int(next(iter(values)))


def request_body_length(request: Request, max_bytes: int) -> int:
    """How many body bytes follow `request` (only Content-Length framing is accepted from a client)."""
    if header(request.headers, "transfer-encoding") is not None:
        raise HttpError(411, "chunked request bodies are not accepted: send a Content-Length")
    length = content_length(request.headers) or 0
    if length > max_bytes:
        raise HttpError(413, f"request body over {max_bytes} bytes")
    return length


def response_framing(response: Response, method: str) -> tuple[str, int]:
    """How the body of `response` to `method` ends: ("none", 0), ("length", n), ("chunked", 0) or ("close", 0)."""
    if method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200:
        return "none", 0
    coding = header(response.headers, "transfer-encoding")
    if coding is not None:
        if coding.strip().lower() != "chunked":
            raise HttpError(502, f"the upstream used an unsupported transfer coding {coding!r}")
        return "chunked", 0
    length = content_length(response.headers)
    return ("length", length) if length is not None else ("close", 0)


async def iter_body(
    reader: asyncio.StreamReader, framing: tuple[str, int], timeout: float, host: str
) -> AsyncIterator[bytes]:
    """The decoded body of `host`'s answer framed as `response_framing` says. A body that ends early raises
    UpstreamFailure(502), a silent one UpstreamFailure(504): a cut answer is never taken for a whole one."""
    kind, remaining = framing
    try:
        if kind == "length":
            while remaining:
                data = await within(reader.read(min(CHUNK, remaining)), timeout)
                if not data:
                    raise UpstreamFailure(502, "the upstream closed before the end of its body", host, CLOSED)
                remaining -= len(data)
                yield data
        elif kind == "chunked":
            while True:
                line = await within(reader.readuntil(b"\r\n"), timeout)
                size_text = line.split(b";", 1)[0].strip()
                if not size_text or len(size_text) > 16 or not re.fullmatch(rb"[0-9a-fA-F]+", size_text):
                    raise HttpError(502, "the upstream sent a malformed chunk size")
                size = int(size_text, 16)
                if size == 0:
                    while (await within(reader.readuntil(b"\r\n"), timeout)) != b"\r\n":
                        pass  # trailers are dropped
                    return
                while size:
                    data = await within(reader.read(min(CHUNK, size)), timeout)
                    if not data:
                        raise UpstreamFailure(502, "the upstream closed inside a chunk", host, CLOSED)
                    size -= len(data)
                    yield data
                if await within(reader.readexactly(2), timeout) != b"\r\n":
                    raise HttpError(502, "the upstream sent a malformed chunk")
        elif kind == "close":
            while data := await within(reader.read(CHUNK), timeout):
                yield data
    except asyncio.IncompleteReadError as exc:
        raise UpstreamFailure(502, "the upstream's body ended early", host, CLOSED) from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpError(502, "the upstream's body was malformed") from exc
    except TimeoutError as exc:
        raise UpstreamFailure(504, "the upstream stopped sending", host, no_answer(timeout)) from exc
    except OSError as exc:  # a reset, or a TLS record error on an https upstream
        raise UpstreamFailure(502, f"the upstream's body was cut: {exc}", host, CLOSED) from exc


def encode_head(first_line: str, headers: Headers) -> bytes:
    lines = [first_line, *(f"{key}: {value}" for key, value in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")
