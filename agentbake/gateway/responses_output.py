"""Chat Completions answers to OpenAI Responses objects: output items, usage, status and the `response` envelope.

Both the unary answer (`openai_to_responses`) and the stream (responses_stream.py) use them. Shapes follow the `openai`
SDK's `types/responses` models.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson

from agentbake.gateway.translate_response import claim_tool_id, reasoning_of
from agentbake.gateway.translate_responses_request import CUSTOM_INPUT

# finish reasons that cut the answer before the model ended it: `incomplete`.
_CUT = ("length", "abort")


def new_id(prefix: str) -> str:
    """A fresh id in OpenAI's style (`resp_...`, `msg_...`, `fc_...`)."""
    return f"{prefix}_{secrets.token_hex(12)}"


def responses_usage(usage: Any) -> dict | None:
    """Responses usage from chat-completions usage; None when the upstream sent none."""
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    reasoning = completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached or 0), "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": int(reasoning or 0)},
        "total_tokens": prompt + completion,
    }


def custom_input(arguments: str) -> str:
    """A custom tool's free-text input from the function arguments the model wrote; the raw arguments when
    they do not hold the one string argument."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    text = value.get(CUSTOM_INPUT) if isinstance(value, dict) else None
    return text if isinstance(text, str) else arguments


def text_part(text: str) -> dict:
    """An `output_text` content part (no annotations; logprobs stay in the trace)."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> dict:
    """An assistant `message` output item; no content part while `text` is None (a stream's first event)."""
    content = [] if text is None else [text_part(text)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict:
    """A `reasoning` output item carrying the reasoning as `reasoning_text` content (no summary)."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content, "status": status}


class ResponseShape:
    """What every answer to one Responses request shares: its id, echoed settings, custom tools, known call ids."""

    def __init__(self, request: dict, custom_tools: frozenset[str], taken_ids: set[str]) -> None:
        self.id = new_id("resp")
        self.created_at = int(time.time())
        self.request = request
        self.custom_tools = custom_tools
        self.taken_ids = taken_ids

    def call_item(self, item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
        """A `function_call` output item, or a `custom_tool_call` one when `name` is a custom tool."""
        item = {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name}
        if name in self.custom_tools:
            return {**item, "type": "custom_tool_call", "input": custom_input(arguments)}
        return {**item, "arguments": arguments}

    def call_id(self, candidate: Any) -> str:
        """The upstream's tool call id unless missing or already in the conversation (then a fresh one)."""
        return claim_tool_id(candidate, self.taken_ids)

    def envelope(self, status: str, output: list[dict], usage: dict | None, error: dict | None = None) -> dict:
        """The `response` object: `status` is in_progress, completed, incomplete or failed."""
        request = self.request
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"),
            "model": request.get("model"),
            "output": output,
            "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": request.get("reasoning"),
            "store": False,
            "temperature": request.get("temperature"),
            "text": request.get("text", {"format": {"type": "text"}}),
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools", []),
            "top_p": request.get("top_p"),
            "usage": usage,
            "metadata": request.get("metadata") or {},
        }


def final_status(finish_reason: str | None) -> str:
    """`incomplete` when the upstream cut the answer (length, an engine abort), else `completed`."""
    return "incomplete" if finish_reason in _CUT else "completed"


def openai_to_responses(completion: dict, shape: ResponseShape) -> dict:
    """The `response` object for a unary chat-completions answer (first choice); when the answer was cut, its
    last item is `incomplete`, as in a stream."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(reasoning_item(new_id("rs"), reasoning, "completed"))
    text = message.get("content")
    if isinstance(text, str) and text:
        output.append(message_item(new_id("msg"), text, "completed"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments or {}).decode()
        call_id = shape.call_id(call.get("id"))
        output.append(shape.call_item(new_id("fc"), call_id, function.get("name") or "", arguments, "completed"))
    status = final_status(choice.get("finish_reason"))
    if output:
        output[-1]["status"] = status
    return shape.envelope(status, output, responses_usage(completion.get("usage")))
