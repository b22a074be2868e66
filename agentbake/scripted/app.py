"""The scripted model as an ASGI app: vLLM's chat-completions endpoints, answering from a script.

Each call's answer comes from `script`, in order, else from `responder` (the task policy with `tasks`). Every call's
request, headers and emitted ids are kept, so tests can compare a client's view with the truth.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from agentbake.gateway.asgi import Send, read_body, respond
from agentbake.scripted import tokens as tk
from agentbake.scripted.policy import ScriptedTask, SolutionPolicy
from agentbake.scripted.script import Fault, Reply, Responder, Script
from agentbake.scripted.vllm import CREATED, Completion, error_body, validate

if TYPE_CHECKING:
    from agentbake.serve import ServedApp
    from agentbake.tasks import Task

MAX_MODEL_LEN = 32768
"""What `/v1/models` and `/tokenize` report as the context length."""


class ScriptedModel:
    """An OpenAI-compatible (vLLM-shaped) chat-completions server that plays a script or a task's solution.

    `ScriptedModel(tasks=[...])` plays, for each request, the solution of the task whose instruction the
    conversation holds (see `SolutionPolicy`). `ScriptedModel()` answers every call with `Reply()` unless
    `script` or `responder` say otherwise."""

    def __init__(
        self,
        *,
        tasks: Sequence[Task | str | Path] = (),
        model_name: str = "scripted",
        keep_log: bool = True,
        tokenizer: str | Path | None = None,
        piecewise: bool = False,
    ) -> None:
        self.model_name = model_name
        self.vocab: tk.Vocabulary = tk.TOY
        """How answers and prompts become ids: the toy vocabulary, or with `tokenizer` (a Hugging Face tokenizer
        folder with a chat template) that tokenizer's ids, prompts rendered by its template as vLLM does."""
        if tokenizer is not None:
            from agentbake.scripted.hf_vocabulary import HFVocabulary

            self.vocab = HFVocabulary(Path(tokenizer), piecewise=piecewise)
        """The id `/v1/models` lists; chat requests are answered whatever model they name."""
        self.keep_log = keep_log
        """False for long runs (the bench, a rollout batch): nothing is kept per call."""
        self.script: list[Script] = []
        """Answers for the next calls, consumed in order before `responder` is asked."""
        policy = SolutionPolicy(tasks) if tasks else None
        self.tasks: list[ScriptedTask] = policy.tasks if policy else []
        """The tasks whose solutions the model plays (empty: none given)."""
        self.responder: Responder = policy or (lambda request: Reply())
        """The answer for a call when `script` is empty: the task policy, or `Reply()` without tasks."""
        self.requests: list[dict] = []
        self.emitted: list[list[int]] = []
        """The completion token ids of each answered call, in order."""
        self.emitted_logprobs: list[list[float | None]] = []
        """The logprob of each of those tokens as the answer stated it (None for NaN, sent as `null`)."""
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.tokenized: list[dict] = []
        self.tokenize_supported = True
        """False answers `/tokenize` with a 404, as a server without the endpoint does."""
        self.completions_supported = True
        """False answers `/v1/completions` with a 404, as a chat-only server does."""
        self.render_prompt: Callable[[dict], list[int]] = self.vocab.render_prompt
        """The prompt ids of a request; with the toy vocabulary `chat_template.render_consistent` makes them extend
        the previous call's prompt + completion ids exactly, as a real chat template does."""
        self.reject_fields: set[str] = set()
        """Request fields answered with a 400 "Extra inputs are not permitted", as vLLM before Nov 2024 and
        other strict servers do (vLLM 0.34 accepts unknown fields silently)."""
        self.ignore_fields: set[str] = set()
        """Request fields accepted and then ignored, as OpenAI-compatible servers without logprobs or vLLM's
        token-id extensions do (`requests` still shows them as sent)."""
        self.logprobs_mode = "raw"
        """What the stated logprobs are, as vLLM's `--logprobs-mode`: "raw" (the policy's, before temperature)
        or "processed" (after temperature: the raw value divided by the request's `temperature`)."""

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
        if scope["type"] != "http":
            return
        body = await read_body(scope, receive)
        path = scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if self.keep_log:
            self.paths.append(path)
            self.headers.append(headers)
        if path == "/health":
            await respond(send, 200, b"", content_type=b"text/plain")
        elif path.endswith("/models"):
            await _json(send, 200, self._models())
        elif path == "/tokenize":
            await self._tokenize(send, body)
        elif path == "/tokenizer_info" and self.vocab.tokenizer_info() is not None:
            # The standard library's JSON, as vLLM's: `model_max_length` may not fit the 64 bits orjson writes.
            await respond(send, 200, json.dumps(self.vocab.tokenizer_info()).encode())
        elif path.endswith("/chat/completions"):
            await self._chat(send, body, headers)
        elif path.endswith("/completions") and self.completions_supported:
            await self._completions(send, body, headers)
        else:
            await _json(send, 404, {"detail": "Not Found"})

    def _models(self) -> dict:
        permission = {
            "id": f"modelperm-{self.model_name}",
            "object": "model_permission",
            "created": CREATED,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        card = {
            "id": self.model_name,
            "object": "model",
            "created": CREATED,
            "owned_by": "vllm",
            "root": self.model_name,
            "parent": None,
            "max_model_len": MAX_MODEL_LEN,
            "permission": [permission],
        }
        return {"object": "list", "data": [card]}

    def _log_emitted(self, completion: Completion) -> None:
        """The answer's sampled ids and logprobs, when the model keeps a log."""
        if self.keep_log:
            self.emitted.append(completion.token_ids)
            self.emitted_logprobs.append(completion.sent_logprobs)

    async def _tokenize(self, send: Callable, body: bytes) -> None:
        if not self.tokenize_supported:
            await _json(send, 404, {"detail": "Not Found"})
            return
        request = _parse(body)
        if not isinstance(request, dict) or not ("messages" in request or "prompt" in request):
            await _json(send, 400, error_body("expected a body with `messages` or `prompt`", 400))
            return
        if self.keep_log:
            self.tokenized.append(request)
        if "messages" in request and request.get("add_generation_prompt", True):
            ids = self.render_prompt(request)  # what a chat call's prompt_token_ids would be
        elif "messages" in request:
            ids = self.vocab.render_messages(request)
        else:
            ids = self.vocab.encode(str(request["prompt"]))
        strs = None
        if request.get("return_token_strs"):
            strs = [self.vocab.token_text(i) for i in ids]
        await _json(send, 200, {"count": len(ids), "max_model_len": MAX_MODEL_LEN, "tokens": ids, "token_strs": strs})

    async def _chat(self, send: Callable, body: bytes, headers: dict[str, str]) -> None:
        request = _parse(body)
        if not isinstance(request, dict):
            message = "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body', 'msg': 'JSON decode error'}"
            await _json(send, 400, error_body(message, 400, kind="Bad Request", param="body"))
            return
        if self.keep_log:
            self.requests.append(request)
        extra = sorted(self.reject_fields & request.keys())
        if extra:
            flat = {"object": "error", "message": f"Extra inputs are not permitted: {', '.join(extra)}", "code": 400}
            await _json(send, 400, flat)
            return
        request = {k: v for k, v in request.items() if k not in self.ignore_fields}
        invalid = validate(request)
        if invalid is not None:
            await _json(send, 400, invalid)
            return
        step = self._next(request)
        if isinstance(step, Fault):
            await _send_fault(send, step)
            return
        completion = Completion(
            request,
            step,
            request_id=headers.get("x-request-id"),
            prompt_ids=self.render_prompt(request),
            logprobs_mode=self.logprobs_mode,
            vocab=self.vocab,
        )
        self._log_emitted(completion)
        if request.get("stream") and not step.ignore_stream:
            await _stream(send, completion)
        elif (
            completion.has_nan() and step.nan_unary == "error"
        ):  # starlette's json.dumps(allow_nan=False) refuses it; vLLM answers 400
            message = "Out of range float values are not JSON compliant"
            await _json(send, 400, error_body(message, 400))
        else:
            await _json(send, 200, completion.unary())

    async def _completions(self, send: Callable, body: bytes, headers: dict[str, str]) -> None:
        """`POST /v1/completions` with one prompt (token ids or text), answered as vLLM does (completions.py)."""
        from agentbake.scripted.completions import CompletionsAnswer, chat_request, prompt_error

        request = _parse(body)
        if not isinstance(request, dict):
            await _json(send, 400, error_body("expected a JSON object", 400, kind="Bad Request", param="body"))
            return
        if self.keep_log:
            self.requests.append(request)
        invalid = prompt_error(request, self.vocab)
        if invalid is not None:
            await _json(send, 400, invalid)
            return
        prompt = request["prompt"]
        prompt_ids = self.vocab.encode(prompt) if isinstance(prompt, str) else list(prompt)
        chat = chat_request(request, str(self.vocab.decode(prompt_ids, skip_special_tokens=False)))
        step = self._next(chat)
        if isinstance(step, Fault):
            await _send_fault(send, step)
            return
        completion = Completion(
            chat, step, request_id=headers.get("x-request-id"), prompt_ids=prompt_ids, vocab=self.vocab
        )
        self._log_emitted(completion)
        answer = CompletionsAnswer(completion, request, prompt_ids)
        if not request.get("stream"):
            await _json(send, 200, answer.unary())
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for chunk in answer.chunks():
            await send(
                {"type": "http.response.body", "body": b"data: " + orjson.dumps(chunk) + b"\n\n", "more_body": True}
            )
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def start_scripted_model(
    tasks: Sequence[Task | str | Path],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    model_name: str = "scripted",
    keep_log: bool = False,
    tokenizer: str | Path | None = None,
) -> ServedApp:
    """Serve `ScriptedModel(tasks=..., tokenizer=...)` from a background thread; returns once it listens.

    Its OpenAI base URL is `served.url + "/v1"`; stop it with `served.stop()` (or use it as a context
    manager). Raises TaskError for a bad task directory, ConfigError for an unusable tokenizer folder,
    ServeError when the address cannot be bound."""
    from agentbake.scripted.chat_template import render_consistent
    from agentbake.serve import serve_in_thread

    model = ScriptedModel(tasks=tasks, model_name=model_name, keep_log=keep_log, tokenizer=tokenizer)
    if tokenizer is None:
        # Rollouts get a template that re-renders history exactly as it was sampled (as a well-behaved
        # real one does), so their traces export as one agent sequence per rollout. A tokenizer's own chat
        # template does that already: the model writes its answers as that template renders them.
        model.render_prompt = render_consistent
    return serve_in_thread(model, host=host, port=port)


async def _send_fault(send: Callable, fault: Fault) -> None:
    """A scripted fault: its delay, then its status, body and headers."""
    await asyncio.sleep(fault.delay_s)
    await _json(send, fault.status, _fault_body(fault), fault.headers)


def _fault_body(fault: Fault) -> Any:
    if fault.body is not None:
        return fault.body
    if fault.flat:
        kind = fault.error_type or error_body("", fault.status)["error"]["type"]
        return {"object": "error", "message": fault.message, "type": kind, "param": fault.param, "code": fault.status}
    return error_body(fault.message, fault.status, kind=fault.error_type, param=fault.param)


def _parse(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


async def _stream(send: Callable, completion: Completion) -> None:
    reply = completion.reply
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})

    async def emit(data: bytes) -> None:
        if reply.keep_alive:
            await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: " + data + b"\n\n", "more_body": True})

    for n, (sent, chunk) in enumerate(completion.chunks()):
        if n > 0 and reply.reset_after is not None and sent >= reply.reset_after:
            raise ConnectionResetError("scripted reset mid-stream")
        if n > 0 and reply.error_after is not None and sent >= reply.error_after:
            failure = error_body("scripted engine failure", 500)
            await emit(orjson.dumps(failure))
            break
        choices = chunk["choices"]
        if reply.omit_finish and not choices:
            break
        if reply.omit_finish and choices[0]["finish_reason"] is not None:  # its tokens, but no finish at all
            choices[0] = {k: v for k, v in choices[0].items() if k not in ("stop_reason", "weight_versions")}
            choices[0]["finish_reason"] = None
            chunk.pop("system_fingerprint", None)
        if reply.garbage and n % 2 == 1:
            await emit(b"{this is not json")
        await emit(orjson.dumps(chunk))  # orjson writes NaN as null, as vLLM's model_dump_json does
        if reply.chunk_delay_s:
            await asyncio.sleep(reply.chunk_delay_s)
    if reply.omit_finish:  # the stream just ends
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def _json(send: Send, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await respond(send, status, orjson.dumps(payload), extra=extra)
