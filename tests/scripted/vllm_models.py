"""Typed models of vLLM 0.34's chat-completions answers, strict: an extra key, a missing key or a wrong type
fails. Written from vLLM's own pydantic models and serializer calls (unary: every field dumped, nulls
included; stream: only the keys vLLM sets, `exclude_unset`), not from the scripted model, which they judge.

A field with a default may be absent (vLLM leaves it unset) but, when present, must have its type.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Len
from pydantic import BaseModel, ConfigDict

FinishReason = Literal["stop", "length", "tool_calls", "abort", "repetition"]
NonEmpty = Len(min_length=1)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# ------------------------------------------------------------------ shared


class TopLogprob(Strict):
    token: str
    logprob: float
    bytes: list[int] | None


class LogprobEntry(Strict):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ReasoningDetails(Strict):
    reasoning_tokens: int


class ErrorInfo(Strict):
    message: str
    type: str
    param: str | None
    code: int


class ErrorEnvelope(Strict):
    error: ErrorInfo


# ------------------------------------------------------------------ unary


class Function(Strict):
    name: str
    arguments: str


class ToolCall(Strict):
    id: str
    type: Literal["function"]
    function: Function


class Message(Strict):
    role: Literal["assistant"]
    content: str | None
    refusal: None
    audio: None
    function_call: None
    tool_calls: Annotated[list[ToolCall], NonEmpty] = None  # type: ignore[assignment]  # omitted when empty
    reasoning: str | None


class LegacyReasoningMessage(Strict):
    """vLLM before ~0.16 named the reasoning field `reasoning_content`."""

    role: Literal["assistant"]
    content: str | None
    refusal: None
    audio: None
    function_call: None
    tool_calls: Annotated[list[ToolCall], NonEmpty] = None  # type: ignore[assignment]
    reasoning_content: str | None


class UnaryLogprobs(Strict):
    content: list[LogprobEntry]


class Usage(Strict):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    completion_tokens_details: ReasoningDetails | None


class Choice(Strict):
    index: int
    message: Message | LegacyReasoningMessage
    logprobs: UnaryLogprobs | None
    finish_reason: FinishReason
    stop_reason: int | str | None
    token_ids: list[int] | None
    routed_experts: None
    weight_versions: None


class ChatCompletion(Strict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: Annotated[list[Choice], NonEmpty]
    service_tier: None
    system_fingerprint: str | None
    usage: Usage
    prompt_logprobs: None
    prompt_token_ids: list[int] | None
    prompt_text: None
    kv_transfer_params: None
    ec_transfer_params: None
    metrics: None


# ------------------------------------------------------------------ stream


class StreamTopLogprob(Strict):
    token: str
    logprob: float | None  # NaN is written as null by model_dump_json
    bytes: list[int] | None


class StreamLogprobEntry(Strict):
    token: str
    logprob: float | None
    bytes: list[int] | None
    top_logprobs: list[StreamTopLogprob]


class StreamFallbackEntry(Strict):
    """The sampled id was missing from the engine's candidates: only the fields vLLM sets."""

    token: str
    bytes: list[int]


class StreamLogprobs(Strict):
    content: list[StreamLogprobEntry | StreamFallbackEntry]


class NamedFunction(Strict):
    name: str


class ArgumentsFunction(Strict):
    arguments: str


class NamedToolCall(Strict):
    id: str
    type: Literal["function"]
    index: int
    function: NamedFunction


class ArgumentsToolCall(Strict):
    index: int
    function: ArgumentsFunction


class Delta(Strict):
    """Every key optional (unset keys are left out) but typed when present; `{}` is a normal delta."""

    content: str | None = None
    reasoning: str = None  # type: ignore[assignment]
    reasoning_content: str = None  # type: ignore[assignment]
    tool_calls: Annotated[list[NamedToolCall | ArgumentsToolCall], NonEmpty] = None  # type: ignore[assignment]


class RoleDelta(Strict):
    role: Literal["assistant"]
    content: Literal[""]


class RunningUsage(Strict):
    """`continuous_usage_stats`: on every chunk."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    completion_tokens_details: ReasoningDetails | None


class FinalUsage(Strict):
    """`include_usage`: the last chunk; its nulls are left out."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int
    completion_tokens_details: ReasoningDetails = None  # type: ignore[assignment]


class RoleChoice(Strict):
    index: int
    delta: RoleDelta
    logprobs: None
    finish_reason: None


class ContentChoice(Strict):
    index: int
    delta: Delta
    logprobs: StreamLogprobs | None
    finish_reason: None
    token_ids: list[int] | None


class FinishChoice(Strict):
    index: int
    delta: Delta
    logprobs: StreamLogprobs | None
    finish_reason: FinishReason
    stop_reason: int | str | None
    token_ids: list[int] | None
    weight_versions: None


class _Chunk(Strict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str


class RoleChunk(_Chunk):
    choices: Annotated[list[RoleChoice], Len(1, 1)]
    usage: RunningUsage = None  # type: ignore[assignment]
    prompt_token_ids: list[int] | None
    prompt_text: None


class ContentChunk(_Chunk):
    choices: Annotated[list[ContentChoice], Len(1, 1)]
    usage: RunningUsage = None  # type: ignore[assignment]
    kv_transfer_params: None


class FinishChunk(_Chunk):
    choices: Annotated[list[FinishChoice], Len(1, 1)]
    usage: RunningUsage = None  # type: ignore[assignment]
    system_fingerprint: str = None  # type: ignore[assignment]  # only when include_usage is off
    kv_transfer_params: None


class UsageChunk(_Chunk):
    choices: Annotated[list[Any], Len(0, 0)]
    usage: FinalUsage
    system_fingerprint: str


# ------------------------------------------------------------------ other routes


class Permission(Strict):
    id: str
    object: Literal["model_permission"]
    created: int
    allow_create_engine: bool
    allow_sampling: bool
    allow_logprobs: bool
    allow_search_indices: bool
    allow_view: bool
    allow_fine_tuning: bool
    organization: str
    group: str | None
    is_blocking: bool


class ModelCard(Strict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str | None
    parent: str | None
    max_model_len: int | None
    permission: list[Permission]


class ModelList(Strict):
    object: Literal["list"]
    data: list[ModelCard]


class TokenizeResponse(Strict):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None


def in_field_order(model: type[BaseModel], data: dict[str, Any]) -> bool:
    """vLLM's serializer writes keys in the model's field order."""
    return [k for k in model.model_fields if k in data] == list(data)
