"""The gateway as one raw ASGI application: routing and the four dialects' handlers.

Raw ASGI, not a framework, because each microsecond here is added to every model call. Plumbing lives in asgi.py,
upstream calls and recording in calls.py.
"""

from __future__ import annotations

import gc
import hmac
import logging
import os
from collections.abc import Callable

import orjson

from agentbake.errors import ConfigError
from agentbake.gateway.asgi import (
    BodyBudget,
    Receive,
    Scope,
    Send,
    carries_token,
    parse_json,
    query,
    read_body,
    respond,
)
from agentbake.gateway.calls import Call, Calls, StreamEnd, error_message
from agentbake.gateway.capture import strip_injected
from agentbake.gateway.config import ROLLOUT_ID, GatewayConfig
from agentbake.gateway.counting import TokenCounter
from agentbake.gateway.errors import (
    Forbidden,
    GatewayError,
    InvalidRequest,
    RouteNotFound,
    Unauthorized,
    UpstreamError,
    upstream_status_error,
)
from agentbake.gateway.google_request import google_to_openai
from agentbake.gateway.google_response import GoogleShape, GoogleStream, openai_to_google
from agentbake.gateway.responses_output import ResponseShape, openai_to_responses
from agentbake.gateway.responses_stream import ResponsesStream
from agentbake.gateway.sse import sse_data, sse_event, sse_events
from agentbake.gateway.translate_request import anthropic_to_openai
from agentbake.gateway.translate_response import StreamTranslator, openai_to_anthropic, used_tool_ids
from agentbake.gateway.translate_responses_request import responses_to_openai
from agentbake.gateway.upstream import UpstreamResponse

logger = logging.getLogger("agentbake.gateway")


class Gateway:
    """The ASGI callable. One instance per process; through `calls` it owns the upstream pool and the trace
    file."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.calls = Calls(config, token_in=True)
        self.counter = TokenCounter(self.calls)
        self.bodies = BodyBudget(config.max_body_bytes_in_flight)
        """Request bodies held by the requests in progress (`max_body_bytes_in_flight`)."""
        token = config.client_token.get_secret_value().encode() if config.client_token else None
        # The header values a request may carry to pass; None when the gateway is open.
        self._accepted: tuple[bytes, bytes] | None = (token, b"Bearer " + token) if token else None
        admin = os.environ.get(config.admin_token_env) if config.admin_token_env else None
        if config.admin_token_env and not admin:
            raise ConfigError(f"admin_token_env: environment variable {config.admin_token_env} is not set")
        self._admin: bytes | None = b"Bearer " + admin.encode() if admin else None

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
                await self.calls.aclose()
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
        error_body = _error_shape(path)
        receive = counted = self.bodies.receiver(receive)
        try:
            if (method, path) == ("PUT", "/policy_version") and self._admin is not None:
                await self._policy_version(scope, receive, send)
                return
            if self._accepted is not None and path != "/healthz" and not carries_token(scope, self._accepted):
                raise Unauthorized(
                    "missing or wrong gateway token: send this rollout's token as x-api-key or Authorization: "
                    "Bearer (Gemini clients: x-goog-api-key or ?key=)"
                )
            rollout_id = self._rollout(path_rollout)
            route = (method, path)
            google = _google_route(path) if method == "POST" else None
            if google is not None:
                await self._google(scope, receive, send, rollout_id, *google)
            elif route == ("POST", "/v1/messages"):
                await self._messages(scope, receive, send, rollout_id)
            elif route == ("POST", "/v1/chat/completions"):
                await self._chat(scope, receive, send, rollout_id)
            elif route == ("POST", "/v1/responses"):
                await self._responses(scope, receive, send, rollout_id)
            elif route == ("POST", "/v1/messages/count_tokens"):
                await self._count_tokens(scope, receive, send)
            elif route == ("GET", "/v1/models"):
                await self._models(send)
            elif route == ("GET", "/healthz"):
                await respond(send, 200, b'{"status":"ok"}')
            else:
                raise RouteNotFound(f"no endpoint {method} {scope['path']}")
        except GatewayError as error:
            status, body = error_body(error)
            await respond(send, status, orjson.dumps(body), extra=error.headers)
        except Exception as exc:
            logger.exception("unexpected gateway failure on %s %s", method, path)
            status, body = error_body(GatewayError(f"gateway error: {exc!r}"))
            await respond(send, status, orjson.dumps(body))
        finally:
            counted.release()

    async def _policy_version(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`PUT /policy_version` `{"policy_version": N}` with the admin token: the version later records carry."""
        admin = self._admin
        if not any(
            name == b"authorization" and hmac.compare_digest(value, admin or b"") for name, value in scope["headers"]
        ):
            raise Unauthorized("PUT /policy_version needs the admin token (admin_token_env) as Authorization: Bearer")
        body = parse_json(await read_body(scope, receive, 4096))
        version = body.get("policy_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidRequest('expected {"policy_version": <integer>}')
        self.calls.policy_version = version
        await respond(send, 200, orjson.dumps({"policy_version": version}))

    # ------------------------------------------------------------------ dialects

    def _translate(self, body: dict) -> dict:
        return anthropic_to_openai(
            body,
            drop_billing_header=self.config.drop_billing_header,
            inner_system_as_user=self.config.inner_system_as_user,
        )

    async def _messages(self, scope: Scope, receive: Receive, send: Send, rollout_id: str | None) -> None:
        body = parse_json(await read_body(scope, receive, self.config.max_body_bytes))
        upstream_body = self._translate(body)
        client_model = body["model"]
        stops = upstream_body.get("stop", [])
        call = self.calls.begin("anthropic", rollout_id, upstream_body)
        response = await self._open_translated(call)
        taken_ids = used_tool_ids(upstream_body["messages"])
        if not upstream_body.get("stream"):
            await self.calls.unary(
                call,
                response,
                send,
                lambda data: orjson.dumps(
                    openai_to_anthropic(data, model=client_model, stop_sequences=stops, taken_ids=taken_ids)
                ),
            )
            return

        translator = StreamTranslator(model=client_model, stop_sequences=stops, taken_ids=taken_ids)

        def tail(end: StreamEnd) -> bytes:
            if end.fatal:
                # The status is already sent; an SSE error event makes Claude Code re-send the request.
                return sse_event("error", UpstreamError(end.fatal).anthropic_body())
            return sse_events(translator.finish())

        await self.calls.relay(
            call,
            response,
            send,
            head=sse_events(translator.start()),
            render=lambda chunk: sse_events(translator.feed(chunk)),
            tail=tail,
            keep_alive=sse_event("ping", {"type": "ping"}),
        )

    async def _open_translated(self, call: Call) -> UpstreamResponse:
        """Send a translated dialect's call upstream; an error status is recorded and raised as the error its
        client acts on (errors.py), with `retry-after` kept."""
        response = await self.calls.open(call)
        if response.status != 200:
            content = await self.calls.read_all(call, response)
            error = upstream_status_error(
                response.status,
                error_message(content),
                response.headers.get("retry-after", "").encode() or None,
            )
            self.calls.record(call, response=None, status=response.status, error=error.message)
            raise error
        return response

    async def _responses(self, scope: Scope, receive: Receive, send: Send, rollout_id: str | None) -> None:
        """`POST /v1/responses`: translated to one chat-completions call, answered as a `response` or its events."""
        body = parse_json(await read_body(scope, receive, self.config.max_body_bytes))
        upstream_body, custom_tools = responses_to_openai(body, inner_system_as_user=self.config.inner_system_as_user)
        call = self.calls.begin("responses", rollout_id, upstream_body)
        response = await self._open_translated(call)
        shape = ResponseShape(body, custom_tools, used_tool_ids(upstream_body["messages"]))
        if not upstream_body.get("stream"):
            await self.calls.unary(call, response, send, lambda data: orjson.dumps(openai_to_responses(data, shape)))
            return

        translator = ResponsesStream(shape)

        def tail(end: StreamEnd) -> bytes:
            # After the 200 a failure is a `response.failed` event, which makes Codex re-send the call.
            return sse_events(translator.fail(end.fatal) if end.fatal else translator.finish())

        await self.calls.relay(
            call,
            response,
            send,
            head=sse_events(translator.start()),
            render=lambda chunk: sse_events(translator.feed(chunk)),
            tail=tail,
            keep_alive=b": keep-alive\n\n",
        )

    async def _count_tokens(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = parse_json(await read_body(scope, receive, self.config.max_body_bytes))
        count = await self.counter.count(self._translate(body))
        await respond(send, 200, orjson.dumps({"input_tokens": count}))

    async def _google(
        self, scope: Scope, receive: Receive, send: Send, rollout_id: str | None, model: str, method: str
    ) -> None:
        """`POST .../models/{model}:generateContent`, `:streamGenerateContent?alt=sse` (one chat-completions
        call, answered as GenerateContentResponses) and `:countTokens`."""
        stream = method == "streamGenerateContent"
        if stream and query(scope).get("alt") != "sse":
            raise InvalidRequest(
                "alt: streamGenerateContent is answered as server-sent events only: add ?alt=sse "
                "(the JSON-array stream is not supported)",
                param="alt",
            )
        body = parse_json(await read_body(scope, receive, self.config.max_body_bytes))
        if method == "countTokens":
            request = body.get("generateContentRequest", body)
            count = await self.counter.count(google_to_openai(request, model, stream=False).body)
            await respond(send, 200, orjson.dumps({"totalTokens": count}))
            return
        upstream_body, include_thoughts = google_to_openai(body, model, stream=stream)
        call = self.calls.begin("google", rollout_id, upstream_body)
        response = await self._open_translated(call)
        shape = GoogleShape(model, include_thoughts, used_tool_ids(upstream_body["messages"]))
        if not stream:
            await self.calls.unary(call, response, send, lambda data: orjson.dumps(openai_to_google(data, shape)))
            return

        translator = GoogleStream(shape)

        def tail(end: StreamEnd) -> bytes:
            # After the 200 a failure is one event holding Gemini's error envelope (the SDKs raise it).
            if end.fatal:
                return sse_data(UpstreamError(end.fatal).google_error()[1])
            return b"".join(sse_data(chunk) for chunk in translator.finish())

        # No keep-alive comments: Google sends none, and the google-genai SDK takes one for a broken chunk.
        await self.calls.relay(
            call,
            response,
            send,
            head=b"",
            render=lambda chunk: b"".join(sse_data(out) for out in translator.feed(chunk)),
            tail=tail,
            keep_alive=None,
        )

    async def _chat(self, scope: Scope, receive: Receive, send: Send, rollout_id: str | None) -> None:
        body = parse_json(await read_body(scope, receive, self.config.max_body_bytes))
        if not isinstance(body.get("messages"), list):
            raise InvalidRequest("messages: expected an array of messages")
        call = self.calls.begin("openai", rollout_id, body)
        response = await self.calls.open(call)
        if response.status != 200:
            # The OpenAI dialect passes the upstream's own status and body through.
            content = await self.calls.read_all(call, response)
            self.calls.record(call, response=None, status=response.status, error=error_message(content))
            extra = (
                [(b"retry-after", response.headers["retry-after"].encode())]
                if "retry-after" in response.headers
                else []
            )
            content_type = response.headers.get("content-type", "application/json").encode()
            await respond(send, response.status, content, content_type, extra)
            return
        injected = call.injected
        if not body.get("stream"):

            def client_copy(data: dict) -> bytes:
                strip_injected(data, injected)
                return orjson.dumps(data)

            await self.calls.unary(call, response, send, client_copy)
            return

        def render(chunk: dict) -> bytes:
            strip_injected(chunk, injected)
            if injected.usage:
                if not chunk.get("choices"):
                    return b""  # the usage-only chunk the client did not ask for
                chunk.pop("usage", None)
            return sse_data(chunk)

        def tail(end: StreamEnd) -> bytes:
            if end.upstream_error is not None:  # vLLM's own error event, as it sent it, then [DONE] as it does
                return sse_data(end.upstream_error) + b"data: [DONE]\n\n"
            if end.fatal:
                # An `error` payload makes the OpenAI SDKs raise instead of returning a truncated answer.
                return sse_data(UpstreamError(end.fatal, status=502).openai_body()) + b"data: [DONE]\n\n"
            return b"data: [DONE]\n\n"

        await self.calls.relay(call, response, send, head=b"", render=render, tail=tail, keep_alive=b": keep-alive\n\n")

    async def _models(self, send: Send) -> None:
        response = await self.calls.client.request("GET", "/models")
        try:
            content = await response.read()
        finally:
            response.close()
        content_type = response.headers.get("content-type", "application/json").encode()
        await respond(send, response.status, content, content_type)


_GOOGLE_PREFIXES = ("/v1beta/models/", "/v1/models/")
_GOOGLE_METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def _google_route(path: str) -> tuple[str, str] | None:
    """(model, method) of a Gemini API path, `/v1beta/models/{model}:{method}` or the same under `/v1/`."""
    for prefix in _GOOGLE_PREFIXES:
        if path.startswith(prefix):
            model, colon, method = path[len(prefix) :].rpartition(":")
            if colon and model and method in _GOOGLE_METHODS:
                return model, method
    return None


def _error_shape(path: str) -> Callable[[GatewayError], tuple[int, dict]]:
    """How errors on `path` are answered: the status and the Anthropic, Responses, Gemini or chat-completions
    envelope."""
    if path.startswith("/v1/messages"):
        return lambda error: (error.status, error.anthropic_body())
    if path == "/v1/responses":
        return lambda error: (error.status, error.responses_body())
    if path.startswith("/v1beta/") or _google_route(path) is not None:
        return GatewayError.google_error
    return lambda error: (error.status, error.openai_body())


def create_app(config: GatewayConfig) -> Gateway:
    """The gateway's ASGI application for `config`.

    With `config.preflight` the upstream is probed first; `not capturable` raises PreflightError. The logprobs mode
    found is stamped on every record unless `config.logprobs_mode` sets it."""
    if config.preflight:
        from agentbake.gateway.preflight import require_capturable

        report = require_capturable(config)
        config = config.model_copy(update={"logprobs_mode": report.logprobs_mode})
    return Gateway(config)
