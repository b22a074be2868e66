"""vLLM's `hermes` tool-call parser (Qwen2.5, Qwen3): each call a JSON `{"name": ..., "arguments": ...}` in
`<tool_call>` tags."""

from __future__ import annotations

import json
import re
from typing import Any

from agentbake.gateway.tool_parse import TOOL_CALL_OPEN, ParsedCall, ToolParser

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def parse_hermes(text: str, tools: Any = None) -> tuple[str | None, list[ParsedCall]]:
    """(content, calls) of a text after its reasoning: content is what precedes the first `<tool_call>`; one call
    that is not JSON with a name and arguments makes the whole text content. The tools play no part."""
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


HERMES = ToolParser("hermes", (TOOL_CALL_OPEN,), parse_hermes)
