"""Answers shaped exactly as vLLM 0.34's chat-completions server sends them, for a scripted `Reply`.

That covers token strings and `top_logprobs` order, clamped `-inf` and NaN, and `token_ids`. It also covers which keys
answers and chunks carry, hermes tool-call chunks, and error envelopes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from agentbake.scripted import tokens as tk
from agentbake.scripted.script import Reply

CREATED = 1767225600
"""`created` of every answer (2026-01-01): fixed, so the same request gets the same bytes back."""
SYSTEM_FINGERPRINT = "vllm-0.34.0-scripted"
VLLM_MIN_LOGPROB = -9999.0
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError", 501: "NotImplementedError"}


def error_type(status: int) -> str:
    """vLLM's error `type` for an HTTP status."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"


def error_body(message: str, status: int, *, kind: str | None = None, param: str | None = None) -> dict:
    """vLLM's error envelope."""
    return {"error": {"message": message, "type": kind or error_type(status), "param": param, "code": status}}


def validate(request: dict[str, Any]) -> dict | None:
    """vLLM's own request checks that a client may trip; the error body, or None. Unknown fields pass."""
    if not isinstance(request.get("messages"), list):
        detail = "{'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required'}"
        return error_body(f"1 validation error:\n  {detail}", 400, kind="Bad Request", param="body.messages")
    if request.get("stream_options") is not None and not request.get("stream"):
        message = "Stream options can only be defined when `stream=True`. (parameter=stream_options)"
        return error_body(message, 400, param="stream_options")
    top = request.get("top_logprobs")
    if top is not None and top != 0:
        if not isinstance(top, int) or (top < 0 and top != -1):
            message = f"`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value={top})"
            return error_body(message, 400, param="top_logprobs")
        if not request.get("logprobs"):
            message = "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)"
            return error_body(message, 400, param="top_logprobs")
    return None


@dataclass
class Group:
    """The tokens of one engine step and the delta the parser makes of them (None: nothing to show yet)."""

    tokens: list[tk.Token]
    delta: dict[str, Any] | None


class Completion:
    """One scripted answer to one request: its tokens, and both wire forms of it."""

    def __init__(
        self,
        request: dict[str, Any],
        reply: Reply,
        *,
        request_id: str | None = None,
        prompt_ids: list[int] | None = None,
        logprobs_mode: str = "raw",
        vocab: tk.Vocabulary = tk.TOY,
    ) -> None:
        self.request = request
        self.vocab = vocab
        self.logprobs_mode = logprobs_mode
        # the policy's logprobs do not depend on how it is sampled: temperature and top_p stay out of their seed
        self.logprob_seed = tk.request_seed({k: v for k, v in request.items() if k not in ("temperature", "top_p")})
        self.reply = reply
        self.seed = tk.request_seed(request)
        self.id = f"chatcmpl-{request_id or self.seed[:8].hex()}"
        self.model = str(request.get("model", ""))
        self.finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        self.stop_reason = reply.matched_stop
        if self.finish == "repetition" and self.stop_reason is None:
            self.stop_reason = "repetition_detected"
        self.call_ids = [
            reply.tool_call_ids[n] if n < len(reply.tool_call_ids) else f"chatcmpl-tool-{self._hex('call', n)}"
            for n in range(len(reply.tool_calls))
        ]
        self.groups = self._groups()
        self.tokens = [t for g in self.groups for t in g.tokens]
        self.prompt_ids = vocab.render_prompt(request) if prompt_ids is None else prompt_ids
        # vLLM nulls logprobs and ids (and drops reasoning) when a parser runs and reasoning is not wanted.
        self.hidden = reply.reasoning_parser and request.get("include_reasoning") is False

    def _hex(self, *salt: object) -> str:
        return hashlib.sha256(self.seed + repr(salt).encode()).hexdigest()[:16]

    @property
    def token_ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    # ---------------------------------------------------------------- tokens

    def _groups(self) -> list[Group]:
        reply = self.reply
        calls = [(name, arguments_text(arguments)) for name, arguments in reply.tool_calls]
        groups: list[Group] = []
        run: list[tk.Token] = []  # consecutive reasoning or content tokens, streamed `step_tokens` at a time
        for token in [*self.vocab.answer_tokens(reply.reasoning, reply.text, calls), None]:
            if token is not None and token.kind in ("reasoning", "content") and (not run or run[0].kind == token.kind):
                run.append(token)
                continue
            if run:
                groups += self._text_groups(run)
                run = []
            if token is None:
                break
            if token.kind in ("reasoning", "content"):
                run.append(token)
            else:
                groups.append(Group([token], self._call_delta(token)))
        if self.finish in ("stop", "tool_calls"):
            if isinstance(self.stop_reason, int):
                end = tk.Token(self.stop_reason, "", "control")
            else:
                end = self.vocab.end_token()
            groups.append(Group([end], {} if reply.tool_calls else {"content": ""}))
        elif self.finish == "abort" or not groups:
            groups.append(Group([], {"content": ""}))  # the engine stopped the request between steps
        return groups

    def _text_groups(self, tokens: list[tk.Token]) -> list[Group]:
        key = self.reply.reasoning_field if tokens[0].kind == "reasoning" else "content"
        step = self.reply.step_tokens
        chunks = [tokens[i : i + step] for i in range(0, len(tokens), step)]
        return [Group(chunk, {key: "".join(t.delta for t in chunk)}) for chunk in chunks]

    def _call_delta(self, token: tk.Token) -> dict[str, Any] | None:
        """The delta of a tool-call token: the call's id and name once the name is whole, then argument fragments."""
        n = token.call
        if token.kind == "name":
            name = self.reply.tool_calls[n][0]
            call = {"id": self.call_ids[n], "type": "function", "index": n, "function": {"name": name}}
            return {"content": None, "tool_calls": [call]}
        if token.kind == "args":
            return {"content": None, "tool_calls": [{"index": n, "function": {"arguments": token.delta}}]}
        return None

    # ---------------------------------------------------------------- logprobs

    def _value(self, position: int) -> float:
        value = self.reply.logprob_values.get(position)
        if value is not None:
            return max(value, VLLM_MIN_LOGPROB)
        return self._stated(tk.sampled_logprob(self.logprob_seed, position))

    def _stated(self, raw: float) -> float:
        """A raw logprob as the answer states it: unchanged, or in processed mode divided by the temperature."""
        temperature = self.request.get("temperature")
        if self.logprobs_mode == "raw" or not isinstance(temperature, (int, float)) or temperature <= 0:
            return raw
        return max(round(raw / temperature, 6), VLLM_MIN_LOGPROB)

    def _name(self, token_id: int, text: str) -> str:
        return f"token_id:{token_id}" if self.request.get("return_tokens_as_token_ids") else text

    def _entry(self, position: int, token: tk.Token, *, stream: bool) -> dict[str, Any]:
        name = self._name(token.id, token.text)
        key_form = self.reply.id_form == "key"
        if position in self.reply.fallback_entries:
            entry: dict[str, Any] = {"token": name, "logprob": VLLM_MIN_LOGPROB, "bytes": list(name.encode())}
            if key_form:
                entry = {"token": name, "token_id": token.id, **entry}
            if stream:  # only the fields vLLM set explicitly
                return {k: v for k, v in entry.items() if k != "logprob"}
            return {**entry, "top_logprobs": []}
        value = self._value(position)
        top = self.request.get("top_logprobs") or 0
        count = len(tk.ALTERNATIVES) + 1 if top == -1 else top
        tops = [(token.id, token.text, value)]
        # The alternatives, like the sampled token's logprob, are the policy's: the same at any temperature.
        table = self.vocab.alternative_table()
        alternatives = tk.alternatives(self.logprob_seed, position, token.id, count - 1, table) if count > 1 else []
        tops += [(token_id, text, self._stated(logprob)) for token_id, text, logprob in alternatives]
        top_entries = []
        for token_id, text, logprob in tops[:count]:
            shown = self._name(token_id, text)
            alt: dict[str, Any] = {"token": shown, "logprob": logprob, "bytes": list(shown.encode())}
            top_entries.append({"token": shown, "token_id": token_id, **alt} if key_form else alt)
        entry = {"token": name, "logprob": value, "bytes": list(token.text.encode()), "top_logprobs": top_entries}
        return {"token": name, "token_id": token.id, **entry} if key_form else entry

    @property
    def sent_logprobs(self) -> list[float | None]:
        """The logprob of each completion token as the answer states it: -9999.0 for `-inf` and fallback entries, None
        for NaN."""
        values = [
            VLLM_MIN_LOGPROB if p in self.reply.fallback_entries else self._value(p) for p in range(len(self.tokens))
        ]
        return [None if math.isnan(v) else v for v in values]

    def _logprobs(self, start: int, tokens: list[tk.Token], *, stream: bool) -> dict | None:
        if not self.request.get("logprobs") or self.hidden:
            return None
        return {"content": [self._entry(start + i, t, stream=stream) for i, t in enumerate(tokens)]}

    def has_nan(self) -> bool:
        return bool(self.request.get("logprobs")) and any(math.isnan(v) for v in self.reply.logprob_values.values())

    # ---------------------------------------------------------------- usage

    def usage(self, completion_tokens: int | None = None, *, details: bool = True) -> dict[str, Any]:
        done = len(self.tokens) if completion_tokens is None else completion_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": len(self.prompt_ids),
            "total_tokens": len(self.prompt_ids) + done,
            "completion_tokens": done,
        }
        if self.reply.reasoning_parser:
            reasoning = sum(1 for t in self.tokens[:done] if t.kind == "reasoning")
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        elif details:
            usage["completion_tokens_details"] = None
        return usage

    # ---------------------------------------------------------------- unary

    def unary(self) -> dict[str, Any]:
        reply = self.reply
        reasoning = None if self.hidden else (reply.reasoning or None)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": (reply.text or None) if reply.tool_calls else reply.text,
            "refusal": None,
            "audio": None,
            "function_call": None,
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": self.call_ids[n],
                    "type": "function",
                    "function": {"name": name, "arguments": arguments_text(args)},
                }
                for n, (name, args) in enumerate(reply.tool_calls)
            ]
        message[reply.reasoning_field] = reasoning
        return_ids = self.request.get("return_token_ids") and not self.hidden
        choice = {
            "index": 0,
            "message": message,
            "logprobs": self._logprobs(0, self.tokens, stream=False),
            "finish_reason": self.finish,
            "stop_reason": self.stop_reason,
            "token_ids": self.token_ids if return_ids else None,
            "routed_experts": None,
            "weight_versions": None,
        }
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": CREATED,
            "model": self.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "usage": self.usage(),
            "prompt_logprobs": None,
            "prompt_token_ids": self.prompt_ids if self.request.get("return_token_ids") else None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }

    # ---------------------------------------------------------------- stream

    def chunks(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(completion tokens sent before this chunk, chunk) for every chunk but [DONE]."""
        options = self.request.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        base = {"id": self.id, "object": "chat.completion.chunk", "created": CREATED, "model": self.model}
        first: dict[str, Any] = {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            ],
        }
        if continuous:
            first["usage"] = self.usage(0)
        first["prompt_token_ids"] = self.prompt_ids if self.request.get("return_token_ids") else None
        first["prompt_text"] = None
        yield 0, first
        return_ids = bool(self.request.get("return_token_ids")) and not self.hidden
        sent = 0
        for n, group in enumerate(self.groups):
            final = n == len(self.groups) - 1
            logprobs = self._logprobs(sent, group.tokens, stream=True)
            delta = group.delta
            if self.hidden and delta is not None and self.reply.reasoning_field in delta:
                delta = None
            if delta is None:
                if not final and logprobs is None and not return_ids:
                    sent += len(group.tokens)
                    continue  # vLLM sends nothing for a step the parser kept back
                delta = {}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}
            if final:
                choice["finish_reason"] = self.finish
                choice["stop_reason"] = self.stop_reason
            choice["token_ids"] = [t.id for t in group.tokens] if return_ids else None
            if final:
                choice["weight_versions"] = None
            chunk: dict[str, Any] = {**base, "choices": [choice]}
            if continuous:
                chunk["usage"] = self.usage(sent + len(group.tokens))
            if final and not include_usage:
                chunk["system_fingerprint"] = SYSTEM_FINGERPRINT
            chunk["kv_transfer_params"] = None
            yield sent, chunk
            sent += len(group.tokens)
        if include_usage:
            yield (
                sent,
                {**base, "choices": [], "usage": self.usage(details=False), "system_fingerprint": SYSTEM_FINGERPRINT},
            )


def arguments_text(arguments: dict[str, Any]) -> str:
    """Tool-call arguments as hermes writes them: Python's json.dumps with ensure_ascii=False."""
    return json.dumps(arguments, ensure_ascii=False)
