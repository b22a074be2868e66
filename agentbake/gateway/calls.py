"""Upstream calls: sending one, reading or relaying its answer, and recording it.

`Calls` owns what every call shares: the upstream client, the trace writer, the turn book, refused fields and the
token-in planner. The dialect handlers in app.py decide what the client sees.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import orjson

from agentbake.gateway.asgi import SSE_HEADERS, Send, respond
from agentbake.gateway.capture import Capture, Injected, strip_injected
from agentbake.gateway.config import GatewayConfig
from agentbake.gateway.errors import GatewayError, TraceFull, UpstreamError
from agentbake.gateway.rewrite import rewrite_request
from agentbake.gateway.sse import SSEDecoder
from agentbake.gateway.stream import ChunkAssembler, completion_as_chunk
from agentbake.gateway.token_in import Plan, TokenIn, chat_route, completions_body, load_token_in
from agentbake.gateway.token_in_answer import CompletionAnswer
from agentbake.gateway.trace import TraceRecord, TraceWriter
from agentbake.gateway.turns import Answered, PrefixBook, TurnBook, prefix_check
from agentbake.gateway.upstream import UpstreamClient, UpstreamResponse

logger = logging.getLogger("agentbake.gateway")

# Everything the gateway asks for to capture tokens; removed from the copy kept in the record.
_ALL_CAPTURE = Injected(logprobs=True, token_ids=True)


@dataclass(slots=True)
class Call:
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
    previous: Answered | None = None
    """The call this one should continue (multi-turn consistency), fixed when it arrives."""
    policy_version: int | None = None
    """The policy version when the call was sent upstream (`Calls.policy_version` then)."""
    plan: Plan | None = None
    """Its route when token-in is on (token_in.py); None when it is off."""
    answer: CompletionAnswer | None = None
    """Turns the completions route's answer into the chat route's; None on the chat route."""

    def adapt(self, data: dict) -> dict:
        """A unary answer in chat-completions form, whichever route it took."""
        return data if self.answer is None else self.answer.unary(data)

    def adapt_chunk(self, chunk: dict) -> list[dict]:
        """A stream chunk as the chat-completions chunks it amounts to."""
        return [chunk] if self.answer is None else self.answer.chunk(chunk)

    def adapt_end(self) -> list[dict]:
        """What a stream that ended without a finish reason still holds back, as chunks."""
        return [] if self.answer is None else self.answer.end()


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """How an upstream stream ended."""

    fatal: str | None = None
    """Why it broke off; None for a clean end, with or without `[DONE]` or a finish_reason."""
    note: str | None = None
    """Skipped malformed events, which clients tolerate too, so they do not end the answer."""
    upstream_error: dict | None = None
    """The upstream's own error event (vLLM's envelope mid-stream), relayed as is to OpenAI clients."""


def error_message(content: bytes) -> str:
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


class Calls:
    """Sends calls upstream and records each one; one instance per gateway."""

    def __init__(self, config: GatewayConfig, *, token_in: bool = False) -> None:
        self.config = config
        self.turns = TurnBook()
        self.prefixes = PrefixBook()
        self.writer = TraceWriter(config.trace) if config.trace else None
        key = config.read_api_key()
        self._upstream_headers = {"content-type": "application/json", "accept": "application/json"}
        if key:
            self._upstream_headers["authorization"] = f"Bearer {key}"
        self._client: UpstreamClient | None = None
        self._refused: set[str] = set()
        self.policy_version = config.policy_version
        """Written on every record from now on; the trainer moves it between steps."""
        self.token_in: TokenIn | None = load_token_in(config, self._upstream_headers) if token_in else None
        """Plans each call's route (token-in continuation); None sends every call to the chat route."""

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
                ca_file=str(self.config.upstream_ca_file) if self.config.upstream_ca_file else None,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def begin(self, dialect: str, rollout_id: str | None, body: dict) -> Call:
        limit = self.config.max_trace_bytes
        if limit is not None and self.writer is not None and self.writer.size >= limit:
            raise TraceFull(
                f"the trace {self.writer.path} holds {self.writer.size} bytes, the most this gateway records "
                f"(max_trace_bytes = {limit}); it takes no more model calls"
            )
        injected = rewrite_request(body, self.config, self._refused)
        call = Call(
            dialect=dialect, rollout_id=rollout_id, body=body, injected=injected, policy_version=self.policy_version
        )
        call.turn, call.retry_of = self.turns.begin(rollout_id, body)
        if self.token_in is not None:
            call.plan = self.token_in.plan(rollout_id, body)
            if call.plan.prefix is not None:
                token_in, tools = self.token_in, body.get("tools")
                opened = call.plan.opens_thinking
                call.answer = CompletionAnswer(token_in.template.eos_text, token_in.parser, tools, opened=opened)
        if self.writer is not None:
            call.previous = self.prefixes.previous(rollout_id, call.retry_of)
        return call

    def record(
        self,
        call: Call,
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
        capture = call.capture
        captured = capture.result(error if error is not None or status == 200 else f"status {status}")
        ids = captured.completion_token_ids
        usage = (response or {}).get("usage") or {}
        prompt = capture.prompt_token_ids
        if status == 200 and ids and isinstance(prompt, list):
            self.prefixes.answered(call.rollout_id, call.turn, prompt, ids)
            if self.token_in is not None and error is None and response is not None:
                message = (response.get("choices") or [{}])[0].get("message")
                continued = call.plan.record.get("continues") if call.plan is not None else None
                self.token_in.answered(call.rollout_id, call.turn, call.body, prompt, ids, message, continued)
        self.writer.write(
            TraceRecord(
                turn=call.turn,
                request=call.body,
                response=response,
                logprobs=capture.logprobs,
                completion_tokens=len(ids) or int(usage.get("completion_tokens") or 0),
                completion_token_ids=ids,
                per_token_logps=captured.per_token_logps,
                finish_reason=finish_reason,
                latency_s=round(time.perf_counter() - call.started, 6),
                timestamp=call.timestamp,
                rollout_id=call.rollout_id,
                dialect=call.dialect,
                prompt_token_ids=prompt,
                upstream_status=status,
                upstream_error=error,
                retry_of=call.retry_of,
                capture=captured.verdict,
                prefix=prefix_check(call.previous, prompt),
                logprobs_mode=self.config.logprobs_mode,
                worker=self.config.worker,
                policy_version=call.policy_version,
                token_in=call.plan.record if call.plan is not None else None,
            )
        )

    async def open(self, call: Call) -> UpstreamResponse:
        """Send the call upstream and return once response headers arrived (body unread on success)."""
        prompt = await self._token_prompt(call)
        while True:
            try:
                if prompt is not None:
                    path, payload = "/completions", completions_body(call.body, prompt)
                else:
                    path, payload = "/chat/completions", call.body
                response = await self.client.request("POST", path, orjson.dumps(payload))
            except UpstreamError as error:
                self.record(call, response=None, status=None, error=error.message)
                raise
            if call.answer is not None and self.token_in is not None and response.status in (404, 405):
                # Not a completions server after all: this call and every later one take the chat route.
                await self.read_all(call, response)
                call.plan, call.answer, prompt = self.token_in.unavailable(response.status), None, None
                continue
            if response.status not in (400, 422) or not call.injected.extensions:
                return response
            content = await self.read_all(call, response)
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

    async def _token_prompt(self, call: Call) -> list[int] | None:
        """A token-in call's prompt: the continued call's ids, then the new messages'.

        When the server cannot tokenize the new messages, the call takes the chat route."""
        plan = call.plan
        if plan is None or plan.prefix is None or self.token_in is None:
            return None
        url = self.config.resolved_tokenize_url
        prompt = await self.token_in.prompt(plan, call.body.get("model"), self.client, url)
        if prompt is None:
            call.plan, call.answer = chat_route("the server's /tokenize did not tokenize the new messages"), None
        return prompt

    async def read_all(self, call: Call, response: UpstreamResponse) -> bytes:
        try:
            return await response.read()
        except UpstreamError as error:
            self.record(call, response=None, status=response.status, error=error.message)
            raise
        finally:
            response.close()

    async def unary(self, call: Call, response: UpstreamResponse, send: Send, render: Callable[[dict], bytes]) -> None:
        """Read a unary upstream answer, record it, and send the client `render(answer)`."""
        content = await self.read_all(call, response)
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            error = UpstreamError("upstream answered 200 with a body that is not a JSON object", status=502)
            self.record(call, response=None, status=200, error=error.message)
            raise error
        try:
            data = call.adapt(data)
            call.capture.add(data)
            payload = render(data)
            finish = data["choices"][0].get("finish_reason")
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            # A server that breaks the chat-completions schema; the record keeps what it sent.
            error = UpstreamError(f"upstream answer has an unexpected shape: {exc!r}", status=502)
            self.record(call, response=data, status=200, error=error.message)
            raise error from exc
        except Exception as exc:
            # A gateway bug: the client gets a 500 and the record still keeps what the upstream sent.
            logger.exception("failed while answering an upstream completion")
            failure = GatewayError(f"gateway error: {exc!r}")
            self.record(call, response=data, status=200, error=failure.message)
            raise failure from exc
        self.record(call, response=data, status=200, finish_reason=finish)
        await respond(send, 200, payload)

    async def events(
        self,
        call: Call,
        response: UpstreamResponse,
        out: Callable[[dict], Awaitable[None]],
        keep_alive: Callable[[], Awaitable[None]] | None = None,
    ) -> StreamEnd:
        """Feed each decoded chunk of an upstream stream to `out` as it arrives, and call `keep_alive` (if
        given) for the upstream's keep-alive comments."""
        decoder = SSEDecoder()
        malformed = 0
        try:
            if "json" in response.headers.get("content-type", ""):
                # The server ignored "stream" and sent one whole completion: relay it as a single chunk.
                try:
                    completion = orjson.loads(await response.read())
                except orjson.JSONDecodeError:
                    return StreamEnd("upstream answered a stream request with a body that is not JSON")
                completion = completion if isinstance(completion, dict) else {}
                chunk = completion_as_chunk(call.adapt(completion) if completion.get("choices") else completion)
                call.capture.add(chunk)
                await out(chunk)
                return StreamEnd()
            async for raw in response.iter_raw():
                events = decoder.feed(raw)
                if decoder.comments:
                    decoder.comments = 0
                    if keep_alive is not None:
                        await keep_alive()
                for data in events:
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
                        # vLLM reports failures after the 200 as one error event (then [DONE]).
                        return StreamEnd(f"upstream error in stream: {error_message(data)}", upstream_error=chunk)
                    for converted in call.adapt_chunk(chunk):
                        call.capture.add(converted)
                        await out(converted)
            for converted in call.adapt_end():
                call.capture.add(converted)
                await out(converted)
        except UpstreamError as error:
            return StreamEnd(f"upstream stream cut mid-way: {error.message}")
        except Exception as exc:
            # A gateway bug must still end the client's stream with an error and leave a record.
            logger.exception("failed while relaying an upstream stream")
            return StreamEnd(f"gateway error while relaying the stream: {exc!r}")
        finally:
            response.close()
        for data in decoder.close():
            malformed += data != b"[DONE]"
        return StreamEnd(note=f"skipped {malformed} malformed SSE event(s)" if malformed else None)

    async def relay(
        self,
        call: Call,
        response: UpstreamResponse,
        send: Send,
        *,
        head: bytes,
        render: Callable[[dict], bytes],
        tail: Callable[[StreamEnd], bytes],
        keep_alive: bytes | None,
    ) -> None:
        """Stream an upstream answer to the client as it arrives, then record it.

        The client gets `head` at once, each chunk as `render` makes it, `keep_alive` per upstream keep-alive, then
        `tail(end)`."""
        assembler = ChunkAssembler()
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        if head:
            await send({"type": "http.response.body", "body": head, "more_body": True})

        async def forward(chunk: dict) -> None:
            assembler.add(chunk)
            data = render(chunk)
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})

        async def ping() -> None:
            await send({"type": "http.response.body", "body": keep_alive, "more_body": True})

        end = await self.events(call, response, forward, ping if keep_alive is not None else None)
        try:
            self.record(
                call,
                response=assembler.completion(),
                status=200,
                error=end.fatal or end.note,
                finish_reason=assembler.finish_reason,
            )
        finally:  # whatever happens, the client's stream is ended properly
            await send({"type": "http.response.body", "body": tail(end), "more_body": False})
