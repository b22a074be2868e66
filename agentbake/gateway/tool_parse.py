"""A completion's text parsed as vLLM's chat server parses it: reasoning, content and tool calls.

Token-in calls go to `/v1/completions`, which returns plain text. Parsing it as vLLM 0.34's chat route would
(`--reasoning-parser qwen3`, and the `--tool-call-parser` in tool_parsers.py) gives the agent the same message on
either route.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One tool call: its function name and its arguments as a JSON string."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Parsed:
    """What the chat route makes of a completion's text."""

    content: str | None
    reasoning: str | None = None
    tool_calls: list[ParsedCall] = field(default_factory=list)


def split_reasoning(text: str, *, opened: bool = False) -> tuple[str | None, str]:
    """(reasoning, the rest) of a completion's text.

    Reasoning runs from a leading `<think>` (or the start, when the prompt `opened` it) to `</think>`, or to the end if
    never closed."""
    if text.startswith(THINK_OPEN):
        text = text[len(THINK_OPEN) :]
    elif not opened:
        return None, text
    reasoning, _, rest = text.partition(THINK_CLOSE)
    return reasoning, rest


@dataclass(frozen=True, slots=True)
class ToolParser:
    """One of vLLM's tool-call parsers, by its `--tool-call-parser` name."""

    name: str
    markers: tuple[str, ...]
    """What may open the calls: a stream's content runs up to the first of them."""
    parse: Callable[[str, Any], tuple[str | None, list[ParsedCall]]]
    """(content, calls) of a text after its reasoning, given the request's `tools` (their schemas may type
    arguments)."""


def parse_completion(text: str, parser: ToolParser, tools: Any = None, *, opened: bool = False) -> Parsed:
    """A completion's whole text as the chat route's message: reasoning, content, tool calls (`opened`: the
    prompt opened `<think>`)."""
    reasoning, rest = split_reasoning(text, opened=opened)
    content, calls = parser.parse(rest, tools)
    if reasoning is not None and not rest:
        content = None
    return Parsed(content=content, reasoning=reasoning, tool_calls=calls)


def held_back(text: str, marker: str) -> int:
    """How many characters at the end of `text` could be the start of `marker` (so a stream holds them)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def message_of(parsed: Parsed, call_ids: list[str]) -> dict[str, Any]:
    """The chat-completions assistant message of a parse (one id per call)."""
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning is not None:
        message["reasoning"] = parsed.reasoning
    if parsed.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call, call_id in zip(parsed.tool_calls, call_ids, strict=True)
        ]
    return message
