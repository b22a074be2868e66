"""A rollout's model calls as the report shows them: per turn its new messages, completion, tool calls, token counts.

Each request repeats the conversation so far, so only what a turn adds is kept. Logprobs shrink to a sparkline.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from typing import Any

import orjson

SPARK_POINTS = 48
"""Most points of a logprob sparkline: longer completions are averaged in buckets."""

Text = Callable[[str], Any]
"""Turns a text into what the page stores for it (the text, cut, or a reference to a shared copy)."""


def turns_of(records: list[dict[str, Any]], text: Text) -> list[dict[str, Any]]:
    """The turns of one rollout from its trace records (raw fields, in file order)."""
    turns = []
    previous: list[Any] | None = None
    previous_tools: list[str] | None = None
    for raw in records:
        request = raw.get("request") if isinstance(raw.get("request"), dict) else {}
        messages = request.get("messages") if isinstance(request.get("messages"), list) else []
        new = messages
        if previous is not None:
            shared = _common_prefix(previous, messages)
            new = messages[shared:]
            if shared == len(previous) and new and _role(new[0]) == "assistant":
                new = new[1:]  # the previous completion, sent back
        previous = messages
        tools = [_tool_name(tool) for tool in request.get("tools") or [] if isinstance(tool, dict)]
        turn: dict[str, Any] = {
            "turn": raw.get("turn"),
            "messages": [_message(message, text) for message in new if isinstance(message, dict)],
            "completion": _completion(raw.get("response"), text),
            "prompt_tokens": _prompt_tokens(raw),
            "completion_tokens": raw.get("completion_tokens"),
            "finish_reason": raw.get("finish_reason"),
            "latency_s": raw.get("latency_s"),
            "status": raw.get("upstream_status"),
            "error": text(raw["upstream_error"]) if isinstance(raw.get("upstream_error"), str) else None,
            "retry_of": raw.get("retry_of"),
            "capture": (raw.get("capture") or {}).get("verdict") if isinstance(raw.get("capture"), dict) else None,
            **logprob_summary(raw.get("per_token_logps")),
        }
        if tools != previous_tools:
            turn["tools"] = tools  # the tools offered, when they changed
            previous_tools = tools
        turns.append(turn)
    return turns


def logprob_summary(values: Any) -> dict[str, Any]:
    """`logprobs`: the sparkline's points (bucket means, at most SPARK_POINTS); `logprob_mean`, `logprob_min` over
    the known values (null and NaN are unknown, never 0)."""
    if not isinstance(values, list) or not values:
        return {}
    try:
        known = array("d", values).tolist()  # all numbers (JSON has no NaN): the common case, in C
    except TypeError:
        known = [
            float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)
        ]
    if not known:
        return {}
    size = math.ceil(len(known) / SPARK_POINTS)
    points = [round(sum(chunk) / len(chunk), 2) for chunk in (known[i : i + size] for i in range(0, len(known), size))]
    return {"logprobs": points, "logprob_mean": round(sum(known) / len(known), 4), "logprob_min": round(min(known), 4)}


def _common_prefix(before: list[Any], after: list[Any]) -> int:
    shared = 0
    for old, new in zip(before, after, strict=False):
        if old != new:
            break
        shared += 1
    return shared


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else None


def _tool_name(tool: dict[str, Any]) -> str:
    function = tool.get("function")
    return str(function.get("name") if isinstance(function, dict) else tool.get("name") or tool.get("type"))


def _prompt_tokens(raw: dict[str, Any]) -> int | None:
    ids = raw.get("prompt_token_ids")
    if isinstance(ids, list):
        return len(ids)
    response = raw.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    return usage.get("prompt_tokens") if isinstance(usage, dict) else None


def _message(message: dict[str, Any], text: Text) -> dict[str, Any]:
    """A chat message: role, text, tool calls and, for a tool's result, the call it answers."""
    shown: dict[str, Any] = {"role": str(message.get("role"))}
    content = _content(message.get("content"))
    if content:
        shown["text"] = text(content)
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        shown["reasoning"] = text(reasoning)
    calls = [_tool_call(call, text) for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    if calls:
        shown["tool_calls"] = calls
    if isinstance(message.get("tool_call_id"), str):
        shown["tool_call_id"] = message["tool_call_id"]
    return shown


def _completion(response: Any, text: Text) -> dict[str, Any] | None:
    if not isinstance(response, dict) or not isinstance(response.get("choices"), list) or not response["choices"]:
        return None
    choice = response["choices"][0]
    message = choice.get("message") if isinstance(choice, dict) else None
    return _message(message, text) if isinstance(message, dict) else None


def _tool_call(call: dict[str, Any], text: Text) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode()
    return {"id": call.get("id"), "name": str(function.get("name")), "arguments": text(arguments)}


def _content(content: Any) -> str:
    """A message's content as text: a string, or the text of its parts (other parts named in brackets)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return orjson.dumps(content).decode()
