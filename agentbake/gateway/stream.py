"""A streamed chat completion's chunks assembled into one completion for the record, and the reverse."""

from __future__ import annotations

from typing import Any

from agentbake.gateway.capture import choices_of
from agentbake.gateway.translate_response import reasoning_of


class ChunkAssembler:
    """Builds the chat.completion a stream amounts to (choice 0), for the trace record."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict] = {}
        self.finish_reason: str | None = None
        self.matched_stop: Any = None
        self.usage: dict | None = None

    def add(self, chunk: dict) -> None:
        if not self.meta:
            self.meta = {k: chunk[k] for k in ("id", "model", "created") if k in chunk}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in choices_of(chunk):
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            reasoning = reasoning_of(delta)
            if reasoning:
                self.reasoning.append(reasoning)
            for call in delta.get("tool_calls") or ():
                self._tool(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self.matched_stop = choice.get("stop_reason")

    def _tool(self, call: dict) -> None:
        slot = self.tool_calls.setdefault(
            call.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if call.get("id"):
            slot["id"] = call["id"]
        function = call.get("function") or {}
        if function.get("name"):
            slot["function"]["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            slot["function"]["arguments"] += function["arguments"]

    def completion(self) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) if self.text else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        if self.matched_stop is not None:
            choice["stop_reason"] = self.matched_stop
        return {**self.meta, "object": "chat.completion", "choices": [choice], "usage": self.usage}


def completion_as_chunk(completion: dict) -> dict:
    """A whole chat.completion as one stream chunk, for servers that answer `stream: true` with JSON."""
    chunk: dict[str, Any] = {k: v for k, v in completion.items() if k != "choices"}
    chunk["choices"] = []
    for choice in choices_of(completion):
        message = choice.get("message")
        delta = dict(message) if isinstance(message, dict) else {}
        if isinstance(delta.get("tool_calls"), list):
            delta["tool_calls"] = [
                {**call, "index": i} for i, call in enumerate(delta["tool_calls"]) if isinstance(call, dict)
            ]
        chunk["choices"].append({**{k: v for k, v in choice.items() if k != "message"}, "delta": delta})
    return chunk
