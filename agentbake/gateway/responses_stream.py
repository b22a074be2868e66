"""Streamed chat-completion chunks to OpenAI Responses stream events, one chunk at a time (`ResponsesStream`).

Output items are emitted one after another, each closed before the next opens, as Codex expects. Every event carries its
`type` and a `sequence_number` from 0.
"""

from __future__ import annotations

from typing import Any

from agentbake.gateway.capture import choices_of
from agentbake.gateway.responses_output import (
    ResponseShape,
    final_status,
    message_item,
    new_id,
    reasoning_item,
    responses_usage,
    text_part,
)
from agentbake.gateway.translate_response import reasoning_of

Event = tuple[str, dict]


def _reasoning_part(text: str) -> dict:
    """A `reasoning_text` content part."""
    return {"type": "reasoning_text", "text": text}


class ResponsesStream:
    """Turns streamed chat-completion chunks into Responses events: `start()`, `feed(chunk)` per chunk, then
    `finish()` (or `fail(message)` when the upstream broke off)."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.output: list[dict] = []
        """Output items done so far, in order."""
        self._sequence = 0
        self._open: dict | None = None  # the open item, in its in-progress form
        self._buffer: list[str] = []  # the open item's text, reasoning or arguments so far
        self._tool_items: set[int] = set()  # upstream tool_call indexes already given an item
        self._open_tool: int | None = None
        self._finish_reason: str | None = None
        self._usage: Any = None

    def _event(self, kind: str, **fields: Any) -> Event:
        """One event named `kind`, numbered next in the stream."""
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return kind, data

    def _at(self) -> dict:
        """Where the open item's events point: its id and output index."""
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.output)}

    def start(self) -> list[Event]:
        """`response.created` and `response.in_progress`, sent as soon as the upstream answered 200."""
        response = self.shape.envelope("in_progress", [], None)
        created = self._event("response.created", response=response)
        return [created, self._event("response.in_progress", response=response)]

    def _begin(self, item: dict) -> list[Event]:
        """Close the open item and open `item` (with its content part for a message or reasoning)."""
        events = self._close("completed")
        self._open, self._buffer = item, []
        events.append(self._event("response.output_item.added", output_index=len(self.output), item=item))
        part = {"message": text_part(""), "reasoning": _reasoning_part("")}.get(item["type"])
        if part is not None:
            events.append(self._event("response.content_part.added", **self._at(), content_index=0, part=part))
        return events

    def _close(self, status: str) -> list[Event]:
        """The `.done` events of the open item, which joins `output` with `status`."""
        item = self._open
        if item is None:
            return []
        text = "".join(self._buffer)
        at = self._at()
        kind = item["type"]
        events: list[Event] = []
        if kind == "message":
            events.append(self._event("response.output_text.done", **at, content_index=0, text=text, logprobs=[]))
            events.append(self._event("response.content_part.done", **at, content_index=0, part=text_part(text)))
            done = message_item(item["id"], text, status)
        elif kind == "reasoning":
            events.append(self._event("response.reasoning_text.done", **at, content_index=0, text=text))
            events.append(self._event("response.content_part.done", **at, content_index=0, part=_reasoning_part(text)))
            done = reasoning_item(item["id"], text, status)
        else:
            # A call without argument fragments still needs parseable arguments for the client.
            arguments = text or "{}"
            done = self.shape.call_item(item["id"], item["call_id"], item["name"], arguments, status)
            if kind == "custom_tool_call":
                if done["input"]:
                    events.append(self._event("response.custom_tool_call_input.delta", **at, delta=done["input"]))
                events.append(self._event("response.custom_tool_call_input.done", **at, input=done["input"]))
            else:
                events.append(self._event("response.function_call_arguments.done", **at, arguments=arguments))
        events.append(self._event("response.output_item.done", output_index=len(self.output), item=done))
        self.output.append(done)
        self._open = self._open_tool = None
        return events

    def feed(self, chunk: dict) -> list[Event]:
        """The events one upstream chunk amounts to (none for a chunk without visible output)."""
        events: list[Event] = []
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in choices_of(chunk):
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = reasoning_of(delta)
            if reasoning:
                if self._open is None or self._open["type"] != "reasoning":
                    events += self._begin(reasoning_item(new_id("rs"), None, "in_progress"))
                self._buffer.append(reasoning)
                at = self._at()
                events.append(self._event("response.reasoning_text.delta", **at, content_index=0, delta=reasoning))
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._open is None or self._open["type"] != "message":
                    events += self._begin(message_item(new_id("msg"), None, "in_progress"))
                self._buffer.append(text)
                at = self._at()
                events.append(self._event("response.output_text.delta", **at, content_index=0, delta=text, logprobs=[]))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    events += self._tool_fragment(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def _tool_fragment(self, call: dict) -> list[Event]:
        """Events for one streamed tool-call fragment: a new call item, or its arguments so far."""
        events: list[Event] = []
        position = call.get("index", 0)
        function = call.get("function") or {}
        if position not in self._tool_items:
            call_id = self.shape.call_id(call.get("id"))
            item = self.shape.call_item(new_id("fc"), call_id, function.get("name") or "", "", "in_progress")
            events += self._begin(item)
            self._tool_items.add(position)
            self._open_tool = position
        elif self._open_tool != position:
            # A fragment for a call already closed: items cannot be reopened, and vLLM's tool parsers never
            # interleave calls, so there is nothing sound to do with it.
            return events
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._buffer.append(arguments)
            if self._open is not None and self._open["type"] == "function_call":
                events.append(self._event("response.function_call_arguments.delta", **self._at(), delta=arguments))
        return events

    def finish(self) -> list[Event]:
        """Close the open item and end the response, `completed` or `incomplete` when the upstream cut the answer."""
        status = final_status(self._finish_reason)
        events = self._close(status)
        response = self.shape.envelope(status, self.output, responses_usage(self._usage))
        kind = "response.completed" if status == "completed" else "response.incomplete"
        events.append(self._event(kind, response=response))
        return events

    def fail(self, message: str) -> list[Event]:
        """`response.failed` for an upstream that broke off after the 200 (Codex retries the call)."""
        error = {"code": "server_error", "message": message}
        response = self.shape.envelope("failed", self.output, responses_usage(self._usage), error=error)
        return [self._event("response.failed", response=response)]
