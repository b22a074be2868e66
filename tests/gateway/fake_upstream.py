"""A scripted OpenAI-compatible upstream that answers like vLLM, for tests and the bench.

It emits token ids the way vLLM does: with `return_tokens_as_token_ids` inside the token string
(`"token": "token_id:<int>"`) or, in `id_form="key"`, as a `token_id` key; with `return_token_ids`
also per choice (`token_ids`) and for the prompt (`prompt_token_ids`). Every call's emitted ids are
kept in `emitted` so tests compare the gateway's trace with the truth. Faults are scripted per call.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Reply:
    """A successful completion."""

    text: str = "Hello from the fake upstream."
    reasoning: str = ""
    tool_calls: list[tuple[str, dict]] = field(default_factory=list)
    finish_reason: str | None = None
    """Defaults to "tool_calls" when there are tool calls, else "stop"."""
    matched_stop: str | None = None
    """vLLM's choice-level `stop_reason` (the stop string that ended generation)."""
    id_form: str = "string"
    """How ids appear in logprobs: "string" ("token": "token_id:<n>", as vLLM) or "key" ("token_id": n)."""
    omit_finish: bool = False
    """Stream: end cleanly without any finish_reason and without [DONE]."""
    garbage: bool = False
    """Stream: interleave malformed SSE data lines."""
    reset_after: int | None = None
    """Stream: abort the connection after this many tokens."""
    error_after: int | None = None
    """Stream: after this many tokens send vLLM's in-stream error payload and end the stream."""
    chunk_delay_s: float = 0.0
    ignore_stream: bool = False
    """Answer a stream request with one JSON completion, as some servers do."""


@dataclass
class Fault:
    """An HTTP error (status) or a hang before any answer (delay_s)."""

    status: int = 500
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    body: Any = None
    """Sent instead of the vLLM error object (any JSON), e.g. a 200 that breaks the schema."""


Script = Reply | Fault
Responder = Callable[[dict], Script]

_TOKEN_TEXT = re.compile(r"\S+\s*|\s+")


def _split_args(arguments: str) -> list[str]:
    return [arguments[i : i + 7] for i in range(0, len(arguments), 7)] or [""]


class FakeUpstream:
    """ASGI app. Set `script` (consumed per call) or `responder` (a function of the request)."""

    def __init__(self, *, keep_log: bool = True) -> None:
        self.keep_log = keep_log
        """False for long benchmark runs: nothing is kept per call."""
        self.script: list[Script] = []
        self.responder: Responder = lambda request: Reply()
        self.requests: list[dict] = []
        self.emitted: list[list[int]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self._ids = itertools.count(1000)
        self.tokenize_supported = True
        self.tokenized: list[dict] = []
        self.reject_fields: set[str] = set()
        """Request fields answered with a 400, as a strict OpenAI-compatible server does."""

    def _next(self, request: dict) -> Script:
        return self.script.pop(0) if self.script else self.responder(request)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].replace("lifespan.", "")
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.keep_log:
            self.paths.append(scope["path"])
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        if scope["path"].endswith("/models"):
            await _json(send, 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
            return
        if scope["path"] == "/tokenize":
            if not self.tokenize_supported:
                await _json(send, 404, {"detail": "Not Found"})
                return
            request = orjson.loads(body)
            self.tokenized.append(request)
            await _json(send, 200, {"count": 7 * len(request["messages"]), "tokens": []})
            return
        request = orjson.loads(body)
        if self.keep_log:
            self.requests.append(request)
        extra = sorted(self.reject_fields & request.keys())
        if extra:
            error = {"object": "error", "message": f"Extra inputs are not permitted: {', '.join(extra)}", "code": 400}
            await _json(send, 400, error)
            return
        step = self._next(request)
        if isinstance(step, Fault):
            await asyncio.sleep(step.delay_s)
            error = {
                "object": "error",
                "message": step.message,
                "type": "Error",
                "param": None,
                "code": step.status,
            }
            await _json(send, step.status, error if step.body is None else step.body, step.headers)
            return
        tokens = self._tokens(step)
        if self.keep_log:
            self.emitted.append([t[1] for t in tokens])
        if request.get("stream") and not step.ignore_stream:
            await self._stream(send, request, step, tokens)
        else:
            await _json(send, 200, self._completion(request, step, tokens))

    def _tokens(self, reply: Reply) -> list[tuple[str, int, str]]:
        """(kind, id, text) per token: reasoning, content, then for each call a start token and
        argument fragments."""
        tokens = [("reasoning", next(self._ids), t) for t in _TOKEN_TEXT.findall(reply.reasoning)]
        tokens += [("content", next(self._ids), t) for t in _TOKEN_TEXT.findall(reply.text)]
        for n, (_, arguments) in enumerate(reply.tool_calls):
            tokens.append((f"call{n}", next(self._ids), ""))
            tokens += [(f"args{n}", next(self._ids), f) for f in _split_args(orjson.dumps(arguments).decode())]
        return tokens

    @staticmethod
    def _logprob(request: dict, reply: Reply, token_id: int, text: str) -> dict:
        logp = -((token_id % 7) / 10) - 0.01
        if reply.id_form == "key":
            entry = {"token": text, "token_id": token_id, "logprob": logp}
        elif request.get("return_tokens_as_token_ids"):
            entry = {"token": f"token_id:{token_id}", "logprob": logp, "bytes": list(text.encode())}
        else:
            entry = {"token": text, "logprob": logp, "bytes": list(text.encode())}
        if request.get("top_logprobs"):
            entry["top_logprobs"] = [{"token": entry["token"], "logprob": logp}]
        return entry

    @staticmethod
    def _finish(reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    @staticmethod
    def _usage(request: dict, tokens: list) -> dict:
        prompt = 11 * len(request["messages"])
        return {
            "prompt_tokens": prompt,
            "completion_tokens": len(tokens),
            "total_tokens": prompt + len(tokens),
        }

    def _completion(self, request: dict, reply: Reply, tokens: list) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(a).decode()},
                }
                for n, (name, a) in enumerate(reply.tool_calls)
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": self._finish(reply),
            "stop_reason": reply.matched_stop,
        }
        if request.get("logprobs"):
            choice["logprobs"] = {"content": [self._logprob(request, reply, i, t) for _, i, t in tokens]}
        answer: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1,
            "model": request["model"],
            "choices": [choice],
            "usage": self._usage(request, tokens),
        }
        if request.get("return_token_ids"):
            choice["token_ids"] = [i for _, i, _ in tokens]
            answer["prompt_token_ids"] = list(range(1, 1 + len(request["messages"])))
        return answer

    async def _stream(self, send: Callable, request: dict, reply: Reply, tokens: list) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        base = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": request["model"],
        }

        async def emit(payload: dict | bytes) -> None:
            data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
            await send({"type": "http.response.body", "body": b"data: " + data + b"\n\n", "more_body": True})

        first: dict[str, Any] = {
            **base,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        }
        if request.get("return_token_ids"):
            first["prompt_token_ids"] = list(range(1, 1 + len(request["messages"])))
        await emit(first)
        for n, (kind, token_id, text) in enumerate(tokens):
            if reply.reset_after is not None and n == reply.reset_after:
                raise ConnectionResetError("scripted reset mid-stream")
            if reply.error_after is not None and n == reply.error_after:
                await emit(
                    {
                        "error": {
                            "message": "scripted engine failure",
                            "type": "InternalServerError",
                            "code": 500,
                        }
                    }
                )
                await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
                return
            if reply.garbage and n % 2 == 0:
                await emit(b"{this is not json")
            if kind == "reasoning":
                delta: dict[str, Any] = {"reasoning_content": text}
            elif kind == "content":
                delta = {"content": text}
            elif kind.startswith("call"):
                position = int(kind[4:])
                name = reply.tool_calls[position][0]
                delta = {
                    "tool_calls": [
                        {
                            "index": position,
                            "id": f"call_{position}",
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            else:
                delta = {"tool_calls": [{"index": int(kind[4:]), "function": {"arguments": text}}]}
            choice: dict[str, Any] = {"index": 0, "delta": delta}
            if request.get("logprobs"):
                choice["logprobs"] = {"content": [self._logprob(request, reply, token_id, text)]}
            if request.get("return_token_ids"):
                choice["token_ids"] = [token_id]
            await emit({**base, "choices": [choice]})
            if reply.chunk_delay_s:
                await asyncio.sleep(reply.chunk_delay_s)
        if reply.omit_finish:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        finish = {
            "index": 0,
            "delta": {},
            "finish_reason": self._finish(reply),
            "stop_reason": reply.matched_stop,
        }
        await emit({**base, "choices": [finish]})
        if (request.get("stream_options") or {}).get("include_usage"):
            await emit({**base, "choices": [], "usage": self._usage(request, tokens)})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def _json(send: Callable, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
    body = orjson.dumps(payload)
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
