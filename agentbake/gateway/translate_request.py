"""Anthropic Messages requests -> OpenAI Chat Completions requests, as pure functions over decoded JSON.

`anthropic_to_openai` is the one entry point. Nothing here does I/O, so every shape can be tested
without a server. Client mistakes raise `InvalidRequest` naming the JSON path at fault.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentbake.gateway.errors import InvalidRequest

BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"

# Keys of a JSON schema that OpenAI-compatible servers (vLLM's guided decoding, OpenAI's strict mode)
# reject or choke on; Claude Code puts `$schema` (draft 2020-12) on every tool.
_SCHEMA_KEYS_DROPPED = frozenset({"$schema", "$id"})

_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}


def fail(path: str, problem: str) -> InvalidRequest:
    """A 400 naming the JSON path at fault, in the message and as the error's `param`."""
    return InvalidRequest(f"{path}: {problem}", param=path)


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def want(value: Any, kind: type | tuple[type, ...], path: str, what: str) -> Any:
    """`value` when it is of `kind`, else a 400 saying what `path` should hold."""
    # bool is an int in Python; JSON booleans must not pass as numbers.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise fail(path, f"expected {what}, got {_type_name(value)}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _block_type(block: Any, path: str) -> str:
    want(block, dict, path, "a content block object")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise fail(f"{path}.type", "missing block type")
    return kind


def _text_of(content: Any, path: str) -> str:
    """Plain text of a string or a list of text blocks (system prompts, system messages)."""
    if isinstance(content, str):
        return content
    want(content, list, path, "a string or an array of text blocks")
    parts = []
    for i, block in enumerate(content):
        kind = _block_type(block, f"{path}[{i}]")
        if kind != "text":
            raise fail(f"{path}[{i}].type", f"expected a text block, got '{kind}'")
        parts.append(want(block.get("text"), str, f"{path}[{i}].text", "a string"))
    return "\n\n".join(parts)


def _system_blocks(system: Any, drop_billing_header: bool) -> str:
    if isinstance(system, str):
        blocks = [{"type": "text", "text": system}]
    else:
        blocks = want(system, list, "system", "a string or an array of text blocks")
    if drop_billing_header:
        blocks = [
            b for b in blocks if not (isinstance(b, dict) and str(b.get("text", "")).startswith(BILLING_HEADER_PREFIX))
        ]
    return _text_of(blocks, "system")


def _image_part(block: dict, path: str) -> dict:
    source = want(block.get("source"), dict, f"{path}.source", "an image source object")
    kind = source.get("type")
    if kind == "base64":
        media = want(source.get("media_type"), str, f"{path}.source.media_type", "a string")
        data = want(source.get("data"), str, f"{path}.source.data", "a string")
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    if kind == "url":
        url = want(source.get("url"), str, f"{path}.source.url", "a string")
        return {"type": "image_url", "image_url": {"url": url}}
    raise fail(f"{path}.source.type", f"unsupported image source '{kind}' (base64 and url are supported)")


def _document_text(block: dict, path: str) -> str:
    source = want(block.get("source"), dict, f"{path}.source", "a document source object")
    kind = source.get("type")
    if kind == "text":
        text = want(source.get("data"), str, f"{path}.source.data", "a string")
    elif kind == "content":
        text = "\n\n".join(
            p["text"] for p in _content_parts(source.get("content"), f"{path}.source.content") if "text" in p
        )
    else:
        raise fail(
            f"{path}.source.type",
            f"document source '{kind}' cannot be sent to an OpenAI-compatible upstream; send it as text",
        )
    title = block.get("title")
    return f"{title}\n\n{text}" if isinstance(title, str) and title else text


def _content_part(block: Any, where: str) -> dict:
    """The OpenAI content part for one user-side text, image, document or tool_reference block."""
    kind = _block_type(block, where)
    if kind == "text":
        return {"type": "text", "text": want(block.get("text"), str, f"{where}.text", "a string")}
    if kind == "image":
        return _image_part(block, where)
    if kind == "document":
        return {"type": "text", "text": _document_text(block, where)}
    if kind == "tool_reference":
        name = want(block.get("tool_name"), str, f"{where}.tool_name", "a string")
        return {"type": "text", "text": f"Tool loaded: {name}"}
    raise fail(f"{where}.type", f"unknown content block type '{kind}'")


def _content_parts(content: Any, path: str) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    want(content, list, path, "a string or an array of content blocks")
    return [_content_part(block, f"{path}[{i}]") for i, block in enumerate(content)]


def flatten(parts: list[dict]) -> str | list[dict]:
    """A bare string when the parts are all text: many chat templates handle nothing else."""
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _tool_result(block: dict, path: str) -> tuple[dict, list[dict]]:
    """The `role: tool` message for a tool_result block, plus image parts for a user message after it.

    Most servers take only text in tool messages."""
    tool_id = want(block.get("tool_use_id"), str, f"{path}.tool_use_id", "a string")
    content = block.get("content", "")
    parts = _content_parts(content, f"{path}.content")
    text = "\n\n".join(p["text"] for p in parts if p["type"] == "text")
    images = [p for p in parts if p["type"] != "text"]
    is_error = block.get("is_error", False)
    want(is_error, bool, f"{path}.is_error", "a boolean")
    if is_error:
        # OpenAI has no error flag on tool messages; the model must still learn the tool failed.
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": tool_id, "content": text}, images


def _user_messages(content: Any, path: str) -> list[dict]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    want(content, list, path, "a string or an array of content blocks")
    # Tool results must directly follow the assistant's tool_calls, so they go first, in block order.
    tool_messages: list[dict] = []
    images: list[dict] = []
    rest: list[Any] = []
    for i, block in enumerate(content):
        if _block_type(block, f"{path}[{i}]") == "tool_result":
            message, extra = _tool_result(block, f"{path}[{i}]")
            tool_messages.append(message)
            images.extend(extra)
        else:
            rest.append((i, block))
    out = tool_messages
    parts = images + [_content_part(block, f"{path}[{i}]") for i, block in rest]
    if parts:
        out.append({"role": "user", "content": flatten(parts)})
    return out


def _assistant_message(content: Any, path: str) -> dict:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    want(content, list, path, "a string or an array of content blocks")
    texts: list[str] = []
    calls: list[dict] = []
    for i, block in enumerate(content):
        where = f"{path}[{i}]"
        kind = _block_type(block, where)
        if kind == "text":
            texts.append(want(block.get("text"), str, f"{where}.text", "a string"))
        elif kind == "tool_use":
            name = want(block.get("name"), str, f"{where}.name", "a string")
            tool_input = block.get("input", {})
            want(tool_input, dict, f"{where}.input", "an object")
            calls.append(
                {
                    "id": want(block.get("id"), str, f"{where}.id", "a string"),
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(tool_input).decode()},
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            # Clients drop returned thinking; upstream chat templates re-derive it or reject it.
            continue
        else:
            raise fail(f"{where}.type", f"unknown content block type '{kind}' in an assistant message")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def clean_schema(schema: Any) -> Any:
    """A copy of a JSON schema without the keys OpenAI-compatible servers reject."""
    if isinstance(schema, dict):
        return {k: clean_schema(v) for k, v in schema.items() if k not in _SCHEMA_KEYS_DROPPED}
    if isinstance(schema, list):
        return [clean_schema(v) for v in schema]
    return schema


def _tools(tools: Any) -> list[dict]:
    want(tools, list, "tools", "an array of tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        want(tool, dict, where, "a tool object")
        if "input_schema" not in tool:
            # Server tools (web_search_*, ...) run at Anthropic; an OpenAI upstream cannot run them.
            continue
        name = want(tool.get("name"), str, f"{where}.name", "a string")
        schema = want(tool["input_schema"], dict, f"{where}.input_schema", "a JSON schema object")
        function: dict[str, Any] = {"name": name, "parameters": clean_schema(schema)}
        description = tool.get("description")
        if description is not None:
            function["description"] = want(description, str, f"{where}.description", "a string")
        # `defer_loading` is an Anthropic tool-search hint; dropping it keeps the tool callable.
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any, out: dict) -> None:
    want(choice, dict, "tool_choice", "an object")
    kind = choice.get("type")
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool":
        name = want(choice.get("name"), str, "tool_choice.name", "a string")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise fail("tool_choice.type", f"unknown tool_choice type '{kind}'")
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False


def _output_config(config: Any, out: dict) -> None:
    want(config, dict, "output_config", "an object")
    effort = config.get("effort")
    if isinstance(effort, str) and effort in _EFFORTS:
        out["reasoning_effort"] = _EFFORTS[effort]
    fmt = config.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": clean_schema(fmt["schema"])},
        }


def anthropic_to_openai(body: Any, *, drop_billing_header: bool = True, inner_system_as_user: bool = False) -> dict:
    """The chat-completions request equivalent to an Anthropic Messages request.

    `inner_system_as_user` sends inner system messages as user messages, for templates that allow a system message only
    first. Fields with no OpenAI equivalent (`metadata`, `cache_control`, ...) are dropped."""
    want(body, dict, "body", "a JSON object")
    model = want(body.get("model"), str, "model", "a string")
    raw_messages = want(body.get("messages"), list, "messages", "an array of messages")
    messages: list[dict] = []
    if body.get("system") is not None:
        system = _system_blocks(body["system"], drop_billing_header)
        if system:
            messages.append({"role": "system", "content": system})
    for i, message in enumerate(raw_messages):
        where = f"messages[{i}]"
        want(message, dict, where, "a message object")
        role = message.get("role")
        if "content" not in message:
            raise fail(f"{where}.content", "missing")
        content = message["content"]
        if role == "user":
            messages.extend(_user_messages(content, f"{where}.content"))
        elif role == "assistant":
            messages.append(_assistant_message(content, f"{where}.content"))
        elif role == "system":
            text = _text_of(content, f"{where}.content")
            messages.append({"role": "user" if inner_system_as_user else "system", "content": text})
        else:
            raise fail(f"{where}.role", f"expected 'user', 'assistant' or 'system', got {role!r}")

    out: dict[str, Any] = {"model": model, "messages": messages}
    if "max_tokens" in body:
        out["max_tokens"] = want(body["max_tokens"], int, "max_tokens", "an integer")
    for key, kind, what in (("temperature", (int, float), "a number"), ("top_p", (int, float), "a number")):
        if body.get(key) is not None:
            out[key] = want(body[key], kind, key, what)
    if body.get("top_k") is not None:
        out["top_k"] = want(body["top_k"], int, "top_k", "an integer")
    if body.get("stop_sequences") is not None:
        stops = want(body["stop_sequences"], list, "stop_sequences", "an array of strings")
        out["stop"] = [want(s, str, f"stop_sequences[{i}]", "a string") for i, s in enumerate(stops)]
    if body.get("tools"):
        tools = _tools(body["tools"])
        if tools:
            out["tools"] = tools
    if body.get("tool_choice") is not None:
        _tool_choice(body["tool_choice"], out)
    thinking = body.get("thinking")
    if thinking is not None:
        want(thinking, dict, "thinking", "an object")
        if thinking.get("type") == "disabled":
            out["chat_template_kwargs"] = {"enable_thinking": False}
    if body.get("output_config") is not None:
        _output_config(body["output_config"], out)
    stream = body.get("stream", False)
    if want(stream, bool, "stream", "a boolean"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out
