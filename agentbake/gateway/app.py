"""The gateway as one raw ASGI application: routing, upstream calls, streaming and recording.

Raw ASGI rather than a framework because every microsecond here is added to each model call; the
per-request work is a body read, one orjson parse, the translation and one pooled upstream request.
"""

from __future__ import annotations

import gc
import hmac
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from agentbake.gateway.capture import Capture, Injected, strip_injected
from agentbake.gateway.config import ROLLOUT_ID, GatewayConfig
from agentbake.gateway.errors import (
    Forbidden,
    GatewayError,
    InvalidRequest,
    RequestTooLarge,
    RouteNotFound,
    Unauthorized,
    UpstreamError,
    upstream_status_error,
)
from agentbake.gateway.rewrite import rewrite_request
from agentbake.gateway.stream import ChunkAssembler, SSEDecoder, completion_as_chunk
from agentbake.gateway.trace import TraceRecord, TraceWriter
from agentbake.gateway.translate import (
    StreamTranslator,
    anthropic_to_openai,
    openai_to_anthropic,
    sse_event,
    used_tool_ids,
)
from agentbake.gateway.turns import TurnBook
from agentbake.gateway.upstream import UpstreamClient, UpstreamResponse

logger = logging.getLogger("agentbake.gateway")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

_JSON = b"application/json"
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
# Everything the gateway asks for to capture tokens; removed from the copy kept in the record.
_ALL_CAPTURE = Injected(logprobs=True, token_ids=True)


@dataclass(slots=True)
class _Call:
    """One upstream call in flight, and what will become its trace record."""

    dialect: str
    rollout_id: str | None
    body: dict
    injected: Injected
    turn: int = 0
    retry_of: int | None = None
    started: float = field(default_factory=time.perf_counter)
    timestamp: float = field(default_factory=time.time)
    capture: Capture = field(default_factory=Capture)


def _error_message(content: bytes) -> str:
    """The human message inside an upstream error body (OpenAI, FastAPI or plain text shapes)."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content[:2000].decode("utf-8", "replace").strip() or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for value in (error, data.get("message"), data.get("detail")):
            if value:
                return value if isinstance(value, str) else orjson.dumps(value).decode()
    return content[:2000].decode("utf-8", "replace")


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise RequestTooLarge(f"request body of {int(value)} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _parse_json(raw: bytes) -> dict:
    if not raw:
        raise InvalidRequest("empty request body: expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("body: expected a JSON object")
    return body


def _carries_token(scope: Scope, accepted: tuple[bytes, bytes]) -> bool:
    """Whether the request carries the gateway token as `x-api-key` or `Authorization: Bearer`."""
    api_key, bearer = accepted
    for name, value in scope["headers"]:
        # compare_digest: the time taken says nothing about how much of the token matched.
        if name == b"x-api-key" and hmac.compare_digest(value, api_key):
            return True
        if name == b"authorization" and hmac.compare_digest(value, bearer):
            return True
    return False


async def _respond(
    send: Send, status: int, body: bytes, content_type: bytes = _JSON, extra: list | None = None
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


class Gateway:
    """The ASGI callable. One instance per process; it owns the upstream pool and the trace file."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.turns = TurnBook()
        self.writer = TraceWriter(config.trace) if config.trace else None
        key = config.read_api_key()
        self._upstream_headers = {"content-type": "application/json", "accept": "application/json"}
        if key:
            self._upstream_headers["authorization"] = f"Bearer {key}"
        self._client: UpstreamClient | None = None
        self._tokenize_works = True
        self._refused: set[str] = set()
        token = config.client_token.get_secret_value().encode() if config.client_token else None
        # The header values a request may carry to pass; None when the gateway is open.
        self._accepted: tuple[bytes, bytes] | None = (token, b"Bearer " + token) if token else None

    @property
    def client(self) -> UpstreamClient:
        # Created on first use so it binds to the serving event loop, with or without lifespan events.
        if self._client is None:
            self._client = UpstreamClient(
                self.config.upstream,
                headers=self._upstream_headers,
                connect_timeout=self.config.connect_timeout_s,
                read_timeout=self.config.read_timeout_s,
                max_connections=self.config.max_connections,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Everything alive now (modules, config) lives as long as the process; keeping it out of
                # the collector's scans shortens the full collections that show up as p99 latency.
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ routing

    def _rollout(self, path_rollout: str | None) -> str | None:
        """The rollout a request's records belong to, given the id in its `/r/<id>/` path (if any)."""
        if path_rollout is not None and not ROLLOUT_ID.fullmatch(path_rollout):
            raise InvalidRequest(f"invalid rollout id {path_rollout!r}: use 1-128 of [A-Za-z0-9._:-]")
        own = self.config.rollout_id
        if own is None:
            return path_rollout
        if path_rollout is not None and path_rollout != own:
            raise Forbidden(f"this gateway serves rollout {own!r} only; the path names rollout {path_rollout!r}")
        return own

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        path_rollout = None
        if path.startswith("/r/"):
            path_rollout, _, rest = path[3:].partition("/")
            path = "/" + rest
        anthropic = path.startswith("/v1/messages")
        try:
            if self._accepted is not None and path != "/healthz" and not _carries_token(scope, self._accepted):
                raise Unauthorized(
                    "missing or wrong gateway token: send this rollout's token as x-api-key or Authorization: Bearer"
                )
            rollout_id = self._rollout(path_rollout)
            route = (method, path)
            if route == ("POST", "/v1/messages"):
                await self._messages(scope, receive, send, rollout_id)
            elif route == ("POST", "/v1/chat/completions"):
                await self._chat(scope, receive, send, rollout_id)
            elif route == ("POST", "/v1/messages/count_tokens"):
                await self._count_tokens(scope, receive, send)
            elif route == ("GET", "/v1/models"):
                await self._models(send)
            elif route == ("GET", "/healthz"):
                await _respond(send, 200, b'{"status":"ok"}')
            else:
                raise RouteNotFound(f"no endpoint {method} {scope['path']}")
        except GatewayError as error:
            body = error.anthropic_body() if anthropic else error.openai_body()
            await _respond(send, error.status, orjson.dumps(body), extra=error.headers)
        except Exception as exc:
            logger.exception("unexpected gateway failure on %s %s", method, path)
            error = GatewayError(f"gateway error: {exc!r}")
            body = error.anthropic_body() if anthropic else error.openai_body()
            await _respond(send, error.status, orjson.dumps(body))

    # ------------------------------------------------------------------ recording

    def _begin(self, dialect: str, rollout_id: str | None, body: dict) -> _Call:
        injected = rewrite_request(body, self.config, self._refused)
        call = _Call(dialect=dialect, rollout_id=rollout_id, body=body, injected=injected)
        call.turn, call.retry_of = self.turns.begin(rollout_id, body)
        return call

    def _record(
        self,
        call: _Call,
        *,
        response: dict | None,
        status: int | None,
        error: str | None = None,
        finish_reason: str | None = None,
    ) -> None:
        if self.writer is None:
            return
        if response is not None:
            strip_injected(response, _ALL_CAPTURE)
        ids = call.capture.completion_token_ids
        usage = (response or {}).get("usage") or {}
        self.writer.write(
            TraceRecord(
                turn=call.turn,
                request=call.body,
                response=response,
                logprobs=call.capture.logprobs,
                completion_tokens=len(ids) or int(usage.get("completion_tokens") or 0),
                completion_token_ids=ids,
                per_token_logps=call.capture.per_token_logps,
                finish_reason=finish_reason,
                latency_s=round(time.perf_counter() - call.started, 6),
                timestamp=call.timestamp,
                rollout_id=call.rollout_id,
                dialect=call.dialect,
                prompt_token_ids=call.capture.prompt_token_ids,
                upstream_status=status,
                upstream_error=error,
                retry_of=call.retry_of,
            )
        )

    # ------------------------------------------------------------------ upstream

    async def _open(self, call: _Call) -> UpstreamResponse:
        """Send the call upstream and return once response headers arrived (body unread on success)."""
        while True:
            try:
                response = await self.client.request("POST", "/chat/completions", orjson.dumps(call.body))
            except UpstreamError as error:
                self._record(call, response=None, status=None, error=error.message)
                raise
            if response.status not in (400, 422) or not call.injected.extensions:
                return response
            content = await self._read_all(call, response)
            refused = [name for name in call.injected.extensions if name.encode() in content]
            if not refused:
                return response
            # Not vLLM (or an older one): drop the fields it rejects, for this call and all later ones.
            logger.warning("upstream rejects %s; no longer sending it", ", ".join(refused))
            self._refused.update(refused)
            for name in refused:
                del call.body[name]
            kept = tuple(name for name in call.injected.extensions if name not in refused)
            call.injected = replace(call.injected, extensions=kept)

    async def _read_all(self, call: _Call, response: UpstreamResponse) -> bytes:
        try:
            return await response.read()
        except UpstreamError as error:
            self._record(call, response=None, status=response.status, error=error.message)
            raise
        finally:
            response.close()

    async def _unary(
        self, call: _Call, response: UpstreamResponse, send: Send, render: Callable[[dict], bytes]
    ) -> None:
        """Read a unary upstream answer, record it, and send the client `render(answer)`."""
        content = await self._read_all(call, response)
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            error = UpstreamError("upstream answered 200 with a body that is not a JSON object", status=502)
            self._record(call, response=None, status=200, error=error.message)
            raise error
        try:
            call.capture.add(data)
            payload = render(data)
            finish = data["choices"][0].get("finish_reason")
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            # A server that breaks the chat-completions schema; the record keeps what it sent.
            error = UpstreamError(f"upstream answer has an unexpected shape: {exc!r}", status=502)
            self._record(call, response=data, status=200, error=error.message)
            raise error from exc
        self._record(call, response=data, status=200, finish_reason=finish)
        await _respond(send, 200, payload)

    async def _events(
        self, call: _Call, response: UpstreamResponse, out: Callable[[dict], Awaitable[None]]
    ) -> tuple[str | None, str | None]:
        """Feed each decoded chunk of an upstream stream to `out` as it arrives.

        Returns (fatal, note): `fatal` says why the stream broke off (None for a clean end, with or
        without `[DONE]` or a finish_reason); `note` reports skipped malformed events, which clients
        tolerate too, so they do not end the answer."""
        decoder = SSEDecoder()
        malformed = 0
        try:
            if "json" in response.headers.get("content-type", ""):
                # The server ignored "stream" and sent one whole completion: relay it as a single chunk.
                try:
                    completion = orjson.loads(await response.read())
                except orjson.JSONDecodeError:
                    return "upstream answered a stream request with a body that is not JSON", None
                chunk = completion_as_chunk(completion if isinstance(completion, dict) else {})
                call.capture.add(chunk)
                await out(chunk)
                return None, None
            async for raw in response.iter_raw():
                for data in decoder.feed(raw):
                    if data == b"[DONE]":
                        continue
                    try:
                        chunk = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        malformed += 1
                        continue
                    if not isinstance(chunk, dict):
                        malformed += 1
                        continue
                    if "error" in chunk and not chunk.get("choices"):
                        # vLLM reports failures after the 200 as an error payload inside the stream.
                        return f"upstream error in stream: {_error_message(data)}", None
                    call.capture.add(chunk)
                    await out(chunk)
        except UpstreamError as error:
            return f"upstream stream cut mid-way: {error.message}", None
        except Exception as exc:
            # A gateway bug must still end the client's stream with an error and leave a record.
            logger.exception("failed while relaying an upstream stream")
            return f"gateway error while relaying the stream: {exc!r}", None
        finally:
            response.close()
        for data in decoder.close():
            malformed += data != b"[DONE]"
        return None, (f"skipped {malformed} malformed SSE event(s)" if malformed else None)

    async def _relay(
        self,
        call: _Call,
        response: UpstreamResponse,
        send: Send,
        *,
        head: bytes,
        render: Callable[[dict], bytes],
        tail: Callable[[str | None], bytes],
    ) -> None:
        """Stream an upstream answer to the client as it arrives: SSE headers and `head` at once, each
        chunk as `render` turns it into client bytes, then the record, then `tail(fatal)`."""
        assembler = ChunkAssembler()
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        if head:
            await send({"type": "http.response.body", "body": head, "more_body": True})

        async def forward(chunk: dict) -> None:
            assembler.add(chunk)
            data = render(chunk)
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})

        fatal, note = await self._events(call, response, forward)
        self._record(
            call,
            response=assembler.completion(),
            status=200,
            error=fatal or note,
            finish_reason=assembler.finish_reason,
        )
        await send({"type": "http.response.body", "body": tail(fatal), "more_body": False})

    # ------------------------------------------------------------------ Anthropic dialect

    def _translate(self, body: dict) -> dict:
        return anthropic_to_openai(
            body,
            drop_billing_header=self.config.drop_billing_header,
            inner_system_as_user=self.config.inner_system_as_user,
        )

    async def _messages(self, scope: Scope, receive: Receive, send: Send, rollout_id: str | None) -> None:
        body = _parse_json(await _read_body(scope, receive, self.config.max_body_bytes))
        upstream_body = self._translate(body)
        client_model = body["model"]
        stops = upstream_body.get("stop", [])
        call = self._begin("anthropic", rollout_id, upstream_body)
        response = await self._open(call)
        if response.status != 200:
            content = await self._read_all(call, response)
            error = upstream_status_error(
                response.status,
                _error_message(content),
                response.headers.get("retry-after", "").encode() or None,
            )
            self._record(call, response=None, status=response.status, error=error.message)
            raise error
        taken_ids = used_tool_ids(upstream_body["messages"])
        if not upstream_body.get("stream"):
            await self._unary(
                call,
                response,
                send,
                lambda data: orjson.dumps(
                    openai_to_anthropic(data, model=client_model, stop_sequences=stops, taken_ids=taken_ids)
                ),
            )
            return

        translator = StreamTranslator(model=client_model, stop_sequences=stops, taken_ids=taken_ids)

        def tail(fatal: str | None) -> bytes:
            if fatal:
                # The status is already sent; an SSE error event makes Claude Code re-send the request.
                return sse_event("error", UpstreamError(fatal).anthropic_body())
            return _events_bytes(translator.finish())

        await self._relay(
            call,
            response,
            send,
            head=_events_bytes(translator.start()),
            render=lambda chunk: _events_bytes(translator.feed(chunk)),
            tail=tail,
        )

    async def _count_tokens(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = _parse_json(await _read_body(scope, receive, self.config.max_body_bytes))
        converted = self._translate(body)
        payload = {
            "model": self.config.model_override or converted["model"],
            "messages": converted["messages"],
            "add_generation_prompt": True,
        }
        if "tools" in converted:
            payload["tools"] = converted["tools"]
        count = await self._tokenize(payload) if self._tokenize_works else None
        if count is None:
            # Without a tokenizer: ~4 bytes of JSON per token, the usual rough ratio for English and code.
            count = math.ceil(len(orjson.dumps(payload["messages"])) / 4)
            count += math.ceil(len(orjson.dumps(payload.get("tools", []))) / 4)
        await _respond(send, 200, orjson.dumps({"input_tokens": count}))

    async def _tokenize(self, payload: dict) -> int | None:
        try:
            response = await self.client.request("POST", self.config.resolved_tokenize_url, orjson.dumps(payload))
            try:
                content = await response.read()
            finally:
                response.close()
        except UpstreamError:
            return None
        if response.status in (404, 405):
            self._tokenize_works = False  # not vLLM: stop asking
            return None
        try:
            count = orjson.loads(content).get("count")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return count if isinstance(count, int) and response.status == 200 else None

    # ------------------------------------------------------------------ OpenAI dialect

    async def _chat(self, scope: Scope, receive: Receive, send: Send, rollout_id: str | None) -> None:
        body = _parse_json(await _read_body(scope, receive, self.config.max_body_bytes))
        if not isinstance(body.get("messages"), list):
            raise InvalidRequest("messages: expected an array of messages")
        call = self._begin("openai", rollout_id, body)
        response = await self._open(call)
        if response.status != 200:
            # The OpenAI dialect passes the upstream's own status and body through.
            content = await self._read_all(call, response)
            self._record(call, response=None, status=response.status, error=_error_message(content))
            extra = (
                [(b"retry-after", response.headers["retry-after"].encode())]
                if "retry-after" in response.headers
                else []
            )
            content_type = response.headers.get("content-type", "application/json").encode()
            await _respond(send, response.status, content, content_type, extra)
            return
        injected = call.injected
        if not body.get("stream"):

            def client_copy(data: dict) -> bytes:
                strip_injected(data, injected)
                return orjson.dumps(data)

            await self._unary(call, response, send, client_copy)
            return

        def render(chunk: dict) -> bytes:
            strip_injected(chunk, injected)
            if injected.usage:
                if not chunk.get("choices"):
                    return b""  # the usage-only chunk the client did not ask for
                chunk.pop("usage", None)
            return b"data: " + orjson.dumps(chunk) + b"\n\n"

        def tail(fatal: str | None) -> bytes:
            if fatal:
                # An `error` payload makes the OpenAI SDKs raise instead of returning a truncated answer.
                return b"data: " + orjson.dumps(UpstreamError(fatal, status=502).openai_body()) + b"\n\n"
            return b"data: [DONE]\n\n"

        await self._relay(call, response, send, head=b"", render=render, tail=tail)

    async def _models(self, send: Send) -> None:
        response = await self.client.request("GET", "/models")
        try:
            content = await response.read()
        finally:
            response.close()
        content_type = response.headers.get("content-type", "application/json").encode()
        await _respond(send, response.status, content, content_type)


def _events_bytes(events: list[tuple[str, dict]]) -> bytes:
    return b"".join(sse_event(name, data) for name, data in events)


def create_app(config: GatewayConfig) -> Gateway:
    """The gateway's ASGI application for `config`."""
    return Gateway(config)
