"""OpenAI Chat Completions answers to Anthropic Messages answers, as pure functions.

`openai_to_anthropic` translates a unary answer, `StreamTranslator` a stream chunk by chunk.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from agentbake.gateway.capture import choices_of

# vLLM's finish reasons -> Anthropic stop reasons. `abort` (the engine stopped
# the request: an admin abort, a KV-cache failure) cut the answer before the model ended it, as a length
# limit does, so the client resumes or gives up as for max_tokens instead of taking a cut answer as final.
# `repetition` is a stop criterion the server was configured with (like a stop token id): the turn is over.
_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "abort": "max_tokens",
    "repetition": "end_turn",
}


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def new_tool_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def claim_tool_id(candidate: Any, taken: set[str]) -> str:
    """The upstream's tool call id, unless it is missing or already used in this conversation.

    Some servers number calls per answer (`call_0` every turn). Claude Code takes a repeated id for an answered call."""
    tool_id = candidate if isinstance(candidate, str) and candidate and candidate not in taken else new_tool_id()
    taken.add(tool_id)
    return tool_id


def used_tool_ids(messages: list[dict]) -> set[str]:
    """Tool call ids already present in a chat-completions conversation."""
    return {call["id"] for message in messages for call in message.get("tool_calls") or () if isinstance(call, dict)}


def usage_block(usage: Any) -> dict:
    """Anthropic usage from OpenAI usage; the cache fields are always present (clients index them)."""
    usage = usage if isinstance(usage, dict) else {}
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def stop_reason(
    finish_reason: str | None, matched_stop: Any, stop_sequences: list[str], used_tools: bool
) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence). vLLM names the matched stop string in the choice's `stop_reason`."""
    if finish_reason == "stop" and isinstance(matched_stop, str) and matched_stop in stop_sequences:
        return "stop_sequence", matched_stop
    if used_tools and finish_reason in (None, "stop", "tool_calls"):
        # Some servers say "stop" (or nothing) after emitting tool calls; the client must still run them.
        return "tool_use", None
    return _STOP_REASONS.get(finish_reason or "stop", "end_turn"), None


def reasoning_of(message: dict) -> str | None:
    """Reasoning text: vLLM's `reasoning_content` (older) or `reasoning` (newer)."""
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) else None


def parse_arguments(arguments: Any) -> dict:
    """Tool input from an OpenAI arguments string; a non-object or broken string becomes {}."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def openai_to_anthropic(
    response: dict, *, model: str, stop_sequences: list[str], taken_ids: set[str] | None = None
) -> dict:
    """The Anthropic Message for a unary chat-completions answer (first choice); `taken_ids` are the
    tool call ids the conversation already holds."""
    taken = set() if taken_ids is None else taken_ids
    choices = response.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict] = []
    reasoning = reasoning_of(message)
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls") or []
    for call in calls:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": claim_tool_id(call.get("id"), taken),
                "name": function.get("name", ""),
                "input": parse_arguments(function.get("arguments")),
            }
        )
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), stop_sequences, bool(calls))
    return {
        "id": new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_block(response.get("usage")),
    }


Event = tuple[str, dict]


class StreamTranslator:
    """Turns streamed chat-completion chunks into Anthropic SSE events, one chunk at a time.

    Blocks are emitted one after another, each closed before the next opens: Claude Code takes a missing stop for
    malformed tool use. Tool arguments travel as `input_json_delta`."""

    def __init__(self, *, model: str, stop_sequences: list[str], taken_ids: set[str] | None = None) -> None:
        self.model = model
        self.stop_sequences = stop_sequences
        self._taken = set() if taken_ids is None else taken_ids
        self.message_id = new_message_id()
        self._index = -1
        self._open: str | None = None  # "thinking" | "text" | "tool"
        self._tool_blocks: dict[int, int] = {}  # OpenAI tool_call index -> Anthropic block index
        self._open_tool: int | None = None
        self._tool_has_args = False
        self._finish_reason: str | None = None
        self._matched_stop: Any = None
        self._usage: dict | None = None

    def start(self) -> list[Event]:
        message = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_block(None),
        }
        return [("message_start", {"type": "message_start", "message": message}), ("ping", {"type": "ping"})]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        events: list[Event] = []
        if self._open == "tool" and not self._tool_has_args:
            # A call without argument fragments still needs a parseable input for the client.
            events.append(self._delta({"type": "input_json_delta", "partial_json": "{}"}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self._index}))
        self._open = None
        self._open_tool = None
        return events

    def _begin(self, kind: str, block: dict) -> list[Event]:
        events = self._close()
        self._index += 1
        self._open = kind
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        events.append(("content_block_start", start))
        return events

    def _delta(self, delta: dict) -> Event:
        return ("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})

    def feed(self, chunk: dict) -> list[Event]:
        events: list[Event] = []
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in choices_of(chunk):
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = reasoning_of(delta)
            if reasoning:
                if self._open != "thinking":
                    events += self._begin("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                events.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._open != "text":
                    events += self._begin("text", {"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": text}))
            for call in delta.get("tool_calls") or ():
                events += self._tool_fragment(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
                self._matched_stop = choice.get("stop_reason")
        return events

    def _tool_fragment(self, call: dict) -> list[Event]:
        events: list[Event] = []
        position = call.get("index", 0)
        function = call.get("function") or {}
        if position not in self._tool_blocks:
            block = {
                "type": "tool_use",
                "id": claim_tool_id(call.get("id"), self._taken),
                "name": function.get("name", ""),
            }
            events += self._begin("tool", {**block, "input": {}})
            self._tool_blocks[position] = self._index
            self._open_tool = position
            self._tool_has_args = False
        elif self._open_tool != position:
            # A fragment for a call whose block is already closed: blocks cannot be reopened, and
            # vLLM's tool parsers never interleave calls, so there is nothing sound to do with it.
            return events
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._tool_has_args = True
            events.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return events

    def finish(self) -> list[Event]:
        """Close the open block and end the message; also right for a stream without finish_reason."""
        events = self._close()
        reason, sequence = stop_reason(
            self._finish_reason, self._matched_stop, self.stop_sequences, bool(self._tool_blocks)
        )
        usage = usage_block(self._usage)
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": usage,
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events
