"""OpenAI Responses requests to Chat Completions requests, as pure functions (`responses_to_openai`).

The gateway keeps no conversation state, so `input` must hold the whole conversation, as Codex sends it. Client mistakes
and what a chat upstream cannot run raise `InvalidRequest` naming the JSON path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from agentbake.gateway.errors import InvalidRequest
from agentbake.gateway.translate_request import clean_schema, fail, flatten, want

CUSTOM_INPUT = "input"
"""The one string argument a `custom` (freeform) tool takes once it is a function upstream."""

_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
_SYSTEM_ROLES = ("system", "developer")
_OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")


class TranslatedResponses(NamedTuple):
    """A Responses request as chat completions, and what answering it in the Responses shape needs."""

    body: dict
    """The chat-completions request."""
    custom_tools: frozenset[str]
    """Names of the request's `custom` tools: the model's calls to them go back as `custom_tool_call` items."""


def _part(part: Any, where: str) -> dict:
    """The chat content part for one Responses content part."""
    want(part, dict, where, "a content part object")
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": want(part.get("text"), str, f"{where}.text", "a string")}
    if kind == "refusal":
        return {"type": "text", "text": want(part.get("refusal"), str, f"{where}.refusal", "a string")}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise fail(f"{where}.image_url", "expected an image URL or data URL (a file_id needs OpenAI's file store)")
        image: dict[str, Any] = {"url": url}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise fail(f"{where}.type", f"unsupported content part type {kind!r} (input_text, output_text, input_image are)")


def _parts(content: Any, where: str) -> list[dict]:
    """Chat content parts of a string or an array of Responses content parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    want(content, list, where, "a string or an array of content parts")
    return [_part(part, f"{where}[{i}]") for i, part in enumerate(content)]


def _text(content: Any, where: str, joiner: str = "\n\n") -> str:
    """Plain text of a string or of text-only content parts."""
    parts = _parts(content, where)
    for i, part in enumerate(parts):
        if part["type"] != "text":
            raise fail(f"{where}[{i}].type", "expected text only in this message")
    return joiner.join(part["text"] for part in parts)


class _Conversation:
    """Chat messages built item by item.

    Leading system messages join the instructions, calls join the assistant message before them, and tool output images
    follow the tool messages."""

    def __init__(self, instructions: str | None, inner_system_as_user: bool) -> None:
        self.system: list[str] = [instructions] if instructions else []
        self.messages: list[dict] = []
        self.images: list[dict] = []
        self.inner_system_as_user = inner_system_as_user

    def add(self, message: dict) -> None:
        """Append a message, first flushing images that waited for the tool messages to end."""
        if message["role"] != "tool" and self.images:
            self.messages.append({"role": "user", "content": self.images})
            self.images = []
        self.messages.append(message)

    def message(self, item: dict, where: str) -> None:
        """A `message` item (or an easy input message, with no `type`)."""
        role = item.get("role")
        if "content" not in item:
            raise fail(f"{where}.content", "missing")
        content = item["content"]
        if role in _SYSTEM_ROLES:
            text = _text(content, f"{where}.content")
            if not self.messages:
                self.system.append(text)
            else:
                self.add({"role": "user" if self.inner_system_as_user else "system", "content": text})
        elif role == "user":
            self.add({"role": "user", "content": flatten(_parts(content, f"{where}.content"))})
        elif role == "assistant":
            self.add({"role": "assistant", "content": _text(content, f"{where}.content", joiner="")})
        else:
            raise fail(f"{where}.role", f"expected 'user', 'assistant', 'system' or 'developer', got {role!r}")

    def call(self, call_id: str, name: str, arguments: str) -> None:
        """A tool call, on the assistant message it follows (one assistant turn), else on a new one."""
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": None}
            self.add(last)
        elif last["content"] == "":
            last["content"] = None
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        last.setdefault("tool_calls", []).append(call)

    def output(self, item: dict, where: str) -> None:
        """A tool's output, as a `role: tool` message; its images wait for the next non-tool message."""
        call_id = want(item.get("call_id"), str, f"{where}.call_id", "a string")
        parts = _parts(item.get("output"), f"{where}.output")
        text = "\n\n".join(part["text"] for part in parts if part["type"] == "text")
        self.images += [part for part in parts if part["type"] != "text"]
        self.add({"role": "tool", "tool_call_id": call_id, "content": text})

    def finish(self) -> list[dict]:
        """The messages, the joined system prompt first."""
        if self.images:
            self.messages.append({"role": "user", "content": self.images})
            self.images = []
        system = "\n\n".join(self.system)
        return ([{"role": "system", "content": system}] if system else []) + self.messages


def _input(body: dict, inner_system_as_user: bool) -> list[dict]:
    """The chat messages for `instructions` and `input` (a string, or an array of items)."""
    instructions = body.get("instructions")
    if instructions is not None:
        want(instructions, str, "instructions", "a string")
    conversation = _Conversation(instructions, inner_system_as_user)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    want(items, list, "input", "a string or an array of input items")
    for i, item in enumerate(items):
        where = f"input[{i}]"
        want(item, dict, where, "an input item object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            conversation.message(item, where)
        elif kind == "function_call":
            call_id = want(item.get("call_id"), str, f"{where}.call_id", "a string")
            name = want(item.get("name"), str, f"{where}.name", "a string")
            conversation.call(call_id, name, want(item.get("arguments"), str, f"{where}.arguments", "a string"))
        elif kind == "custom_tool_call":
            call_id = want(item.get("call_id"), str, f"{where}.call_id", "a string")
            name = want(item.get("name"), str, f"{where}.name", "a string")
            text = want(item.get("input"), str, f"{where}.input", "a string")
            conversation.call(call_id, name, orjson.dumps({CUSTOM_INPUT: text}).decode())
        elif kind in _OUTPUT_ITEMS:
            conversation.output(item, where)
        elif kind == "reasoning":
            # Chat templates re-derive or strip past reasoning; the Anthropic dialect drops thinking alike.
            continue
        elif kind == "item_reference":
            raise fail(f"{where}.type", "this gateway stores no items: send the item itself, not a reference")
        else:
            raise fail(f"{where}.type", f"input item type {kind!r} cannot be sent to a chat-completions upstream")
    return conversation.finish()


def _tools(tools: Any) -> tuple[list[dict], frozenset[str]]:
    """Chat function tools for `function` and `custom` tools, and the names of the custom ones.

    Other types (`web_search`, `local_shell`, ...) run at OpenAI or need items a chat upstream never sends, so the model
    is not offered them."""
    want(tools, list, "tools", "an array of tools")
    out: list[dict] = []
    custom: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        want(tool, dict, where, "a tool object")
        kind = tool.get("type")
        if kind not in ("function", "custom"):
            continue
        name = want(tool.get("name"), str, f"{where}.name", "a string")
        if kind == "function":
            parameters = tool.get("parameters")
            schema = {"type": "object", "properties": {}} if parameters is None else parameters
            want(schema, dict, f"{where}.parameters", "a JSON schema object")
            function: dict[str, Any] = {"name": name, "parameters": clean_schema(schema)}
            if isinstance(tool.get("strict"), bool):
                function["strict"] = tool["strict"]
        else:
            # A freeform tool becomes a function of one string; its `format` (a grammar) is not enforced.
            custom.add(name)
            text = {"type": "string", "description": "The tool's whole input, as free text."}
            function = {
                "name": name,
                "parameters": {"type": "object", "properties": {CUSTOM_INPUT: text}, "required": [CUSTOM_INPUT]},
            }
        if tool.get("description") is not None:
            function["description"] = want(tool["description"], str, f"{where}.description", "a string")
        out.append({"type": "function", "function": function})
    return out, frozenset(custom)


def _tool_choice(choice: Any) -> str | dict:
    """The chat `tool_choice` for a Responses one (a mode, or a named function or custom tool)."""
    if choice in ("auto", "none", "required"):
        return choice
    want(choice, dict, "tool_choice", "'auto', 'none', 'required' or an object")
    if choice.get("type") in ("function", "custom"):
        name = want(choice.get("name"), str, "tool_choice.name", "a string")
        return {"type": "function", "function": {"name": name}}
    raise fail("tool_choice.type", f"unsupported tool_choice type {choice.get('type')!r} (function and custom are)")


def _text_format(text: Any, out: dict) -> None:
    """`text.format` as the chat `response_format` (plain text needs none)."""
    want(text, dict, "text", "an object")
    fmt = text.get("format")
    if fmt is None:
        return
    want(fmt, dict, "text.format", "an object")
    kind = fmt.get("type")
    if kind == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        schema = want(fmt.get("schema"), dict, "text.format.schema", "a JSON schema object")
        spec: dict[str, Any] = {"name": fmt.get("name") or "output", "schema": clean_schema(schema)}
        if isinstance(fmt.get("strict"), bool):
            spec["strict"] = fmt["strict"]
        out["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif kind != "text":
        raise fail("text.format.type", f"unsupported format {kind!r} (text, json_object, json_schema are)")


def _reasoning(reasoning: Any, out: dict) -> None:
    """`reasoning.effort` as `reasoning_effort`, or `none` as the thinking switch turned off."""
    want(reasoning, dict, "reasoning", "an object")
    effort = reasoning.get("effort")
    if effort == "none":
        out["chat_template_kwargs"] = {"enable_thinking": False}
    elif isinstance(effort, str) and effort in _EFFORTS:
        out["reasoning_effort"] = _EFFORTS[effort]


def _refuse_state(body: dict) -> None:
    """Refuse what needs state kept at OpenAI: this gateway answers each call from its body alone."""
    if body.get("previous_response_id") is not None:
        raise InvalidRequest(
            "previous_response_id: this gateway keeps no responses; send the whole conversation in `input` "
            "(as with store=false)",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    for key, problem in (
        ("conversation", "this gateway keeps no conversations; send the whole conversation in `input`"),
        ("prompt", "stored prompt templates live at OpenAI; send `instructions` and `input` instead"),
    ):
        if body.get(key) is not None:
            raise fail(key, problem)
    if body.get("background") is True:
        raise fail("background", "background responses are not supported; stream the answer instead")


def responses_to_openai(body: Any, *, inner_system_as_user: bool = False) -> TranslatedResponses:
    """The chat-completions request equivalent to a Responses request.

    Leading system and developer messages join `instructions`; `inner_system_as_user` makes later ones user messages.
    Fields with no chat equivalent (`store`, `include`, `metadata`, ...) and unknown keys are dropped."""
    want(body, dict, "body", "a JSON object")
    _refuse_state(body)
    model = want(body.get("model"), str, "model", "a string")
    if "input" not in body:
        raise fail("input", "missing: send the whole conversation (this gateway keeps none)")
    out: dict[str, Any] = {"model": model, "messages": _input(body, inner_system_as_user)}
    custom: frozenset[str] = frozenset()
    if body.get("tools"):
        tools, custom = _tools(body["tools"])
        if tools:
            out["tools"] = tools
    choice = _tool_choice(body["tool_choice"]) if body.get("tool_choice") is not None else None
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        want(parallel, bool, "parallel_tool_calls", "a boolean")
    if "tools" in out:  # chat completions refuse both without tools
        if choice is not None:
            out["tool_choice"] = choice
        if parallel is not None:
            out["parallel_tool_calls"] = parallel
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = want(body["max_output_tokens"], int, "max_output_tokens", "an integer")
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = want(body[key], (int, float), key, "a number")
    if body.get("text") is not None:
        _text_format(body["text"], out)
    if body.get("reasoning") is not None:
        _reasoning(body["reasoning"], out)
    if want(body.get("stream", False), bool, "stream", "a boolean"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return TranslatedResponses(out, custom)
