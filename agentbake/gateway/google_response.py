"""Chat Completions answers -> Gemini `GenerateContentResponse`s: unary (`openai_to_google`) and streamed
(`GoogleStream`, one chunk in, the response chunks it amounts to out). Pure functions over decoded JSON, no
I/O; shapes follow the `google-genai` SDK's `types.GenerateContentResponse`.
"""

from __future__ import annotations

import secrets
from typing import Any

from agentbake.gateway.capture import choices_of
from agentbake.gateway.translate_response import claim_tool_id, parse_arguments, reasoning_of

# vLLM's finish reasons -> Gemini's: calls end with STOP, as Gemini's do; an
# engine abort cut the answer as a length limit does.
_FINISH = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "repetition": "STOP",
    "length": "MAX_TOKENS",
    "abort": "MAX_TOKENS",
}


def usage_metadata(usage: Any) -> dict | None:
    """Gemini usage from chat-completions usage (reasoning counted as thoughts); None when none came."""
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    details = usage.get("completion_tokens_details")
    thoughts = int((details.get("reasoning_tokens") if isinstance(details, dict) else 0) or 0)
    out = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion - thoughts,
        "totalTokenCount": prompt + completion,
    }
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    return out


def finish_reason(reason: Any) -> str:
    """Gemini's finishReason for a chat one (STOP when the upstream sent none)."""
    return _FINISH.get(reason, "OTHER") if reason else "STOP"


class GoogleShape:
    """What every answer to one Gemini request shares: its id, the client's model, shown reasoning, known call ids."""

    def __init__(self, model: str, include_thoughts: bool, taken_ids: set[str]) -> None:
        self.response_id = secrets.token_hex(12)
        self.model = model
        self.include_thoughts = include_thoughts
        self.taken_ids = taken_ids

    def call_part(self, call_id: Any, name: str, arguments: Any) -> dict:
        """A `functionCall` part, args as an object; the id is the upstream's unless missing or repeated."""
        call = {"id": claim_tool_id(call_id, self.taken_ids), "name": name, "args": parse_arguments(arguments)}
        return {"functionCall": call}

    def response(self, parts: list[dict], finish: str | None = None, usage: dict | None = None) -> dict:
        """One GenerateContentResponse (a whole answer, or a stream chunk) holding `parts`."""
        candidate: dict[str, Any] = {"index": 0}
        if parts:
            candidate["content"] = {"role": "model", "parts": parts}
        if finish is not None:
            candidate["finishReason"] = finish
        out: dict[str, Any] = {"candidates": [candidate]}
        if usage is not None:
            out["usageMetadata"] = usage
        out["modelVersion"] = self.model
        out["responseId"] = self.response_id
        return out


def openai_to_google(completion: dict, shape: GoogleShape) -> dict:
    """The GenerateContentResponse for a unary chat-completions answer (first choice)."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    parts: list[dict] = []
    reasoning = reasoning_of(message)
    if reasoning and shape.include_thoughts:
        parts.append({"text": reasoning, "thought": True})
    text = message.get("content")
    if isinstance(text, str) and text:
        parts.append({"text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(shape.call_part(call.get("id"), function.get("name") or "", function.get("arguments")))
    return shape.response(parts, finish_reason(choice.get("finish_reason")), usage_metadata(completion.get("usage")))


class GoogleStream:
    """Turns streamed chat-completion chunks into GenerateContentResponse chunks.

    Text and thoughts go out as they arrive, each function call whole once complete, then a last chunk with finishReason
    and usageMetadata."""

    def __init__(self, shape: GoogleShape) -> None:
        self.shape = shape
        self._calls: dict[int, dict] = {}  # upstream tool_call index -> {"id", "name", "arguments"}, not yet sent
        self._sent_calls: set[int] = set()
        self._finish: str | None = None
        self._usage: Any = None

    def _flush_calls(self) -> list[dict]:
        """The function call parts gathered so far, in arrival order; each is sent once."""
        parts = [self.shape.call_part(c["id"], c["name"], "".join(c["arguments"])) for c in self._calls.values()]
        self._sent_calls.update(self._calls)
        self._calls = {}
        return parts

    def feed(self, chunk: dict) -> list[dict]:
        """The response chunks one upstream chunk amounts to (none for a chunk without visible output)."""
        parts: list[dict] = []
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in choices_of(chunk):
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = reasoning_of(delta)
            if reasoning and self.shape.include_thoughts:
                parts.append({"text": reasoning, "thought": True})
            text = delta.get("content")
            if isinstance(text, str) and text:
                parts += self._flush_calls()
                parts.append({"text": text})
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    parts += self._tool_fragment(call)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return [self.shape.response(parts)] if parts else []

    def _tool_fragment(self, call: dict) -> list[dict]:
        """Gather one streamed tool-call fragment; a new call completes (and sends) the ones before it."""
        position = call.get("index", 0)
        function = call.get("function") or {}
        parts: list[dict] = []
        if position in self._sent_calls:
            # A fragment for a call already sent: vLLM's tool parsers never interleave calls.
            return parts
        if position not in self._calls:
            parts = self._flush_calls()
            self._calls[position] = {"id": call.get("id"), "name": function.get("name") or "", "arguments": []}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            self._calls[position]["arguments"].append(arguments)
        return parts

    def finish(self) -> list[dict]:
        """The last chunk: calls not yet sent, finishReason and usage; also right for a stream without a
        finish_reason."""
        usage = usage_metadata(self._usage)
        return [self.shape.response(self._flush_calls(), finish_reason(self._finish), usage)]
