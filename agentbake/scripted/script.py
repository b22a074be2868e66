"""What the scripted model answers: a `Reply` (a completion in any of vLLM's wire variants) or a `Fault`.

Defaults reproduce vLLM 0.34 exactly; every other field selects a variant a real server can send, or a fault.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FinishReason = Literal["stop", "length", "tool_calls", "abort", "repetition"]


class Reply(BaseModel):
    """A successful completion: reasoning, then text, then tool calls, as a hermes-parsing vLLM sends them."""

    model_config = ConfigDict(extra="forbid")

    text: str = "Hello from the scripted model."
    """The answer's visible text (before any tool call)."""
    reasoning: str = ""
    """Reasoning text, sent between `<think>` tokens in the `reasoning` field (see `reasoning_field`)."""
    tool_calls: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)
    """(function name, arguments) per call, in order."""
    tool_call_ids: list[str] = Field(default_factory=list)
    """Ids of the tool calls, in order; by default vLLM's `chatcmpl-tool-<16 hex>` (fixed per request). Give
    the same id in two answers (e.g. "call_0", as servers that number calls per answer do) to test a client
    against repeated ids."""
    finish_reason: FinishReason | None = None
    """Defaults to "tool_calls" when there are tool calls, else "stop". "length", "abort" and "repetition"
    end without the end-of-sequence token, as the engine does."""
    matched_stop: int | str | None = None
    """vLLM's `stop_reason`: the stop string or stop token id that ended generation. "repetition" sets
    "repetition_detected" when this is None."""
    id_form: Literal["string", "key"] = "string"
    """How logprob entries name their token: "string" as vLLM (`"token_id:<n>"` when asked, else the text) or "key" (an
    extra `token_id` key, as some other servers do)."""
    reasoning_field: Literal["reasoning", "reasoning_content"] = "reasoning"
    """The delta/message key of reasoning: vLLM 0.34's `reasoning`, or releases before ~0.16's
    `reasoning_content`."""
    reasoning_parser: bool = False
    """Act as a server started with `--reasoning-parser`: usage carries
    `completion_tokens_details.reasoning_tokens`, and a request's `include_reasoning: false` drops reasoning
    and nulls logprobs and token ids."""
    logprob_values: dict[int, float] = Field(default_factory=dict)
    """Logprob of the completion token at this position. `-inf` is sent as -9999.0 (vLLM clamps it); NaN is
    `null` in a stream and makes a unary answer an HTTP 400, as vLLM's serializers do."""
    nan_unary: Literal["error", "null"] = "error"
    """Unary answers holding a NaN logprob: vLLM's HTTP 400 ("error"), or written as `null` ("null"), as a
    server serializing with pydantic's or orjson's JSON mode does."""
    fallback_entries: list[int] = Field(default_factory=list)
    """Positions whose logprob entry is vLLM's fallback (the sampled id was missing from the engine's
    candidates): logprob -9999.0 and no alternatives (in a stream only `token` and `bytes`)."""
    step_tokens: int = Field(1, ge=1)
    """Text and reasoning tokens per streamed chunk (one engine step can hold several tokens)."""
    keep_alive: bool = False
    """Stream: a `: keep-alive` comment line before every chunk (`--sse-keep-alive-interval`)."""
    omit_finish: bool = False
    """Stream: end cleanly without any finish_reason and without [DONE]."""
    garbage: bool = False
    """Stream: interleave malformed SSE data lines."""
    reset_after: int | None = None
    """Stream: abort the connection after this many tokens."""
    error_after: int | None = None
    """Stream: after this many tokens send vLLM's in-stream error event, then [DONE]."""
    chunk_delay_s: float = 0.0
    """Stream: seconds to wait after each chunk."""
    ignore_stream: bool = False
    """Answer a stream request with one JSON completion, as some servers do."""


class Fault(BaseModel):
    """An HTTP error (status) or a hang before any answer (delay_s)."""

    model_config = ConfigDict(extra="forbid")

    status: int = 500
    """HTTP status of the error answer."""
    message: str = "scripted failure"
    """The error's message."""
    error_type: str | None = None
    """vLLM's error `type`; by default derived from the status (400 BadRequestError, 404 NotFoundError,
    500 InternalServerError, 501 NotImplementedError, else the status phrase)."""
    param: str | None = None
    """The request field at fault, if any."""
    flat: bool = False
    """Send the flat error object of vLLM before 0.10.1 (`{"object": "error", "message": ...}`) instead of
    the `{"error": {...}}` envelope."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers, e.g. retry-after."""
    delay_s: float = 0.0
    """Seconds to wait before answering."""
    body: Any = None
    """Sent instead of the error object (any JSON), e.g. a 200 that breaks the schema."""


Script = Reply | Fault
Responder = Callable[[dict[str, Any]], Script]
