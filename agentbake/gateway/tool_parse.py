"""A completion's text as vLLM's chat server parses it: reasoning, content and hermes tool calls.

Token-in calls go to `/v1/completions`, which returns plain text; the gateway parses it as vLLM 0.34's chat
route would for the Qwen3 / Hermes family (`--tool-call-parser hermes`, `--reasoning-parser qwen3`), so the
agent gets the same message whichever route the call took:
- reasoning: after a leading `<think>` (or from the start, when the prompt opened `<think>` itself, as Qwen3.5's
  and Qwen3's thinking-2507 templates do) up to `</think>`, as vLLM's `qwen3` reasoning parser splits it; the
  content is what follows `</think>` (None when nothing does); a thought never closed is all reasoning (cut short);
- tool calls: every `<tool_call>...</tool_call>` (the last one may be left open at the end of the text) holds
  one JSON object `{"name": ..., "arguments": ...}`; the arguments go out as `json.dumps(..., ensure_ascii=False)`;
  the content is the text before the first `<tool_call>` (None when empty); if any call fails to parse (not JSON,
  no `name` or `arguments`) no call is made and the whole text is the content.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


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
    """(reasoning, the rest) of a completion's text: reasoning when it starts with `<think>` or the prompt
    `opened` it, up to `</think>` (all of it when never closed); else no reasoning and the whole text."""
    if text.startswith(THINK_OPEN):
        text = text[len(THINK_OPEN) :]
    elif not opened:
        return None, text
    reasoning, _, rest = text.partition(THINK_CLOSE)
    return reasoning, rest


def parse_tool_calls(text: str) -> tuple[str | None, list[ParsedCall]]:
    """(content, calls) of a text after its reasoning, by vLLM's hermes tool parser's rules (module docstring)."""
    if TOOL_CALL_OPEN not in text:
        return text, []
    try:
        calls = []
        for closed, unclosed in _TOOL_CALL.findall(text):
            raw = json.loads(closed or unclosed)
            calls.append(ParsedCall(str(raw["name"]), json.dumps(raw["arguments"], ensure_ascii=False)))
    except (ValueError, KeyError, TypeError):
        return text, []
    content = text[: text.find(TOOL_CALL_OPEN)]
    return content or None, calls


def parse_completion(text: str, *, opened: bool = False) -> Parsed:
    """A completion's whole text as the chat route's message: reasoning, content, tool calls (`opened`: the
    prompt opened `<think>`)."""
    reasoning, rest = split_reasoning(text, opened=opened)
    content, calls = parse_tool_calls(rest)
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
