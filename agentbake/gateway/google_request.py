"""Gemini API (`generateContent`) requests -> Chat Completions requests, as pure functions over decoded JSON.

`google_to_openai` is the entry point (tools, schemas and `toolConfig` are in google_tools.py). Nothing here
does I/O; client mistakes raise `InvalidRequest` naming the JSON path at fault.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from agentbake.gateway.google_tools import json_schema, tool_choice, tools
from agentbake.gateway.translate_request import clean_schema, fail, flatten, want

_LEVELS = {"MINIMAL": "low", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}
_USER_ROLES = ("user", "function")  # `function`: the role older Gemini clients give function responses
# Parts that need Google's own services (its file store, its code sandbox): nothing upstream can run them.
_REFUSED_PARTS = {
    "fileData": "files live in Google's file store; send them inline or as text",
    "executableCode": "code execution runs at Google",
    "codeExecutionResult": "code execution runs at Google",
}


class TranslatedGoogle(NamedTuple):
    """A Gemini request as chat completions, and what answering it in Gemini's shape needs."""

    body: dict
    """The chat-completions request."""
    include_thoughts: bool
    """`thinkingConfig.includeThoughts`: reasoning goes back as `thought` parts only when asked for."""


def _camel(config: dict) -> dict:
    """A config object with its snake_case keys as camelCase: Google accepts both spellings, and the Python
    SDK sends `thinkingConfig`'s keys in snake_case."""
    out = {}
    for key, value in config.items():
        head, *rest = key.split("_")
        out[head + "".join(word.title() for word in rest)] = value
    return out


def arguments_text(args: dict) -> str:
    """A call's arguments as vLLM's tool parsers write them, so a call sent back renders as the model sampled it."""
    return json.dumps(args, ensure_ascii=False)


def _image(part: dict, where: str) -> dict:
    """The chat image part for an `inlineData` part; other media are refused."""
    data = want(part["inlineData"], dict, f"{where}.inlineData", "an object")
    mime = want(data.get("mimeType"), str, f"{where}.inlineData.mimeType", "a string")
    if not mime.startswith("image/"):
        problem = f"{mime!r} cannot be sent to a chat-completions upstream (images can)"
        raise fail(f"{where}.inlineData.mimeType", problem)
    payload = want(data.get("data"), str, f"{where}.inlineData.data", "a base64 string")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{payload}"}}


def _kind(part: Any, where: str) -> str:
    """Which data field a part carries (`thought` for reasoning parts, which are dropped)."""
    want(part, dict, where, "a part object")
    if part.get("thought") is True:
        return "thought"
    for kind in ("text", "functionCall", "functionResponse", "inlineData", *_REFUSED_PARTS):
        if kind in part:
            if kind in _REFUSED_PARTS:
                raise fail(f"{where}.{kind}", _REFUSED_PARTS[kind])
            return kind
    raise fail(where, "expected one of text, functionCall, functionResponse, inlineData")


def _parts(content: dict, where: str) -> list[Any]:
    return want(content.get("parts"), list, f"{where}.parts", "an array of parts")


def _system(instruction: Any) -> str:
    """The text of `systemInstruction` (a Content of text parts, or a bare string)."""
    if isinstance(instruction, str):
        return instruction
    want(instruction, dict, "systemInstruction", "a Content object")
    texts = []
    for j, part in enumerate(_parts(instruction, "systemInstruction")):
        where = f"systemInstruction.parts[{j}]"
        if _kind(part, where) != "text":
            raise fail(where, "expected a text part")
        texts.append(want(part["text"], str, f"{where}.text", "a string"))
    return "\n\n".join(texts)


def _response_text(response: Any, where: str) -> str:
    """A tool message's text from a `functionResponse.response`: its `output`, its `error`, else the object as JSON."""
    want(response, dict, where, "an object")
    if set(response) == {"output"} and isinstance(response["output"], str):
        return response["output"]
    if set(response) == {"error"} and isinstance(response["error"], str):
        return f"Error: {response['error']}"
    return json.dumps(response, ensure_ascii=False)


class _Contents:
    """Chat messages built turn by turn; each call keeps one id, so the next turn's function response answers it."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.pending: list[tuple[str, str]] = []  # (id, name) of the last model turn's unanswered calls

    def model(self, content: dict, i: int) -> None:
        """A `model` turn: one assistant message, its text joined as streamed, its calls as `tool_calls`."""
        where = f"contents[{i}]"
        texts: list[str] = []
        calls: list[dict] = []
        self.pending = []
        for j, part in enumerate(_parts(content, where)):
            at = f"{where}.parts[{j}]"
            kind = _kind(part, at)
            if kind == "text":
                texts.append(want(part["text"], str, f"{at}.text", "a string"))
            elif kind == "functionCall":
                call = want(part["functionCall"], dict, f"{at}.functionCall", "an object")
                name = want(call.get("name"), str, f"{at}.functionCall.name", "a string")
                args = want(call.get("args", {}), dict, f"{at}.functionCall.args", "an object")
                given = call.get("id")
                call_id = given if isinstance(given, str) and given else f"call_{i}_{j}"
                self.pending.append((call_id, name))
                function = {"name": name, "arguments": arguments_text(args)}
                calls.append({"id": call_id, "type": "function", "function": function})
            elif kind != "thought":  # past reasoning is dropped, as the other dialects drop it
                raise fail(f"{at}.{kind}", "not allowed in a model turn")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
        if calls:
            message["tool_calls"] = calls
        self.messages.append(message)

    def _answered(self, response: dict, at: str) -> str:
        """The id of the pending call a function response answers: the one with its id, else the first with its name."""
        name = want(response.get("name"), str, f"{at}.name", "a string")
        given = response.get("id")
        matches = [n for n, (call_id, _) in enumerate(self.pending) if call_id == given]
        matches += [n for n, (_, call_name) in enumerate(self.pending) if call_name == name]
        if not matches:
            raise fail(at, f"answers no functionCall of the model turn before it (name {name!r}, id {given!r})")
        return self.pending.pop(matches[0])[0]

    def user(self, content: dict, i: int) -> None:
        """A `user` turn: tool messages for its function responses first, then one user message for text and images."""
        where = f"contents[{i}]"
        tool_messages: list[dict] = []
        rest: list[dict] = []
        for j, part in enumerate(_parts(content, where)):
            at = f"{where}.parts[{j}]"
            kind = _kind(part, at)
            if kind == "functionResponse":
                response = want(part["functionResponse"], dict, f"{at}.functionResponse", "an object")
                call_id = self._answered(response, f"{at}.functionResponse")
                text = _response_text(response.get("response", {}), f"{at}.functionResponse.response")
                tool_messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
                extra = response.get("parts") or []
                for k, inner in enumerate(want(extra, list, f"{at}.functionResponse.parts", "an array of parts")):
                    inner_at = f"{at}.functionResponse.parts[{k}]"
                    if _kind(inner, inner_at) != "inlineData":
                        raise fail(inner_at, "expected an inlineData part")
                    rest.append(_image(inner, inner_at))
            elif kind == "text":
                rest.append({"type": "text", "text": want(part["text"], str, f"{at}.text", "a string")})
            elif kind == "inlineData":
                rest.append(_image(part, at))
            elif kind == "functionCall":
                raise fail(f"{at}.functionCall", "not allowed in a user turn")
        self.messages += tool_messages
        if rest:
            self.messages.append({"role": "user", "content": flatten(rest)})


def _messages(body: dict) -> list[dict]:
    """The chat messages for `systemInstruction` and `contents`."""
    turns = _Contents()
    if body.get("systemInstruction") is not None:
        system = _system(body["systemInstruction"])
        if system:
            turns.messages.append({"role": "system", "content": system})
    contents = want(body.get("contents"), list, "contents", "an array of Content objects")
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        want(content, dict, where, "a Content object")
        role = content.get("role", "user")
        if role == "model":
            turns.model(content, i)
        elif role in _USER_ROLES:
            turns.user(content, i)
        else:
            raise fail(f"{where}.role", f"expected 'user' or 'model', got {role!r}")
    return turns.messages


def _response_format(config: dict) -> dict | None:
    """`responseMimeType` with `responseSchema` (OpenAPI subset) or `responseJsonSchema` as `response_format`."""
    mime = config.get("responseMimeType")
    if mime is None or mime == "text/plain":
        return None
    if mime != "application/json":
        raise fail("generationConfig.responseMimeType", f"unsupported {mime!r} (text/plain, application/json are)")
    if config.get("responseJsonSchema") is not None:
        schema = want(config["responseJsonSchema"], dict, "generationConfig.responseJsonSchema", "a JSON schema")
        schema = clean_schema(schema)
    elif config.get("responseSchema") is not None:
        schema = json_schema(want(config["responseSchema"], dict, "generationConfig.responseSchema", "a schema"))
    else:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def _thinking(config: Any, out: dict) -> bool:
    """`thinkingConfig` as the thinking switch (`thinkingBudget: 0`) or `reasoning_effort` (`thinkingLevel`);
    returns `includeThoughts`."""
    config = _camel(want(config, dict, "generationConfig.thinkingConfig", "an object"))
    if config.get("thinkingBudget") == 0:
        out["chat_template_kwargs"] = {"enable_thinking": False}
    level = config.get("thinkingLevel")
    if isinstance(level, str) and level.upper() in _LEVELS:
        out["reasoning_effort"] = _LEVELS[level.upper()]
    path = "generationConfig.thinkingConfig.includeThoughts"
    return want(config.get("includeThoughts", False), bool, path, "a boolean")


def _generation(config: Any, out: dict) -> bool:
    """`generationConfig` onto the chat request; returns `includeThoughts`."""
    config = _camel(want(config, dict, "generationConfig", "an object"))
    for key, name in (("temperature", "temperature"), ("topP", "top_p")):
        if config.get(key) is not None:
            out[name] = want(config[key], (int, float), f"generationConfig.{key}", "a number")
    for key, name in (("presencePenalty", "presence_penalty"), ("frequencyPenalty", "frequency_penalty")):
        if config.get(key) is not None:
            out[name] = want(config[key], (int, float), f"generationConfig.{key}", "a number")
    if config.get("topK") is not None:  # a float in the SDKs' types
        top_k = want(config["topK"], (int, float), "generationConfig.topK", "a whole number")
        if top_k != int(top_k):
            raise fail("generationConfig.topK", f"expected a whole number, got {top_k}")
        out["top_k"] = int(top_k)
    for key, name in (("maxOutputTokens", "max_tokens"), ("seed", "seed")):
        if config.get(key) is not None:
            out[name] = want(config[key], int, f"generationConfig.{key}", "an integer")
    if config.get("stopSequences") is not None:
        stops = want(config["stopSequences"], list, "generationConfig.stopSequences", "an array of strings")
        out["stop"] = [want(s, str, f"generationConfig.stopSequences[{i}]", "a string") for i, s in enumerate(stops)]
    count = config.get("candidateCount")
    if count is not None and want(count, int, "generationConfig.candidateCount", "an integer") != 1:
        raise fail("generationConfig.candidateCount", "only 1 candidate is supported")
    response_format = _response_format(config)
    if response_format is not None:
        out["response_format"] = response_format
    return _thinking(config["thinkingConfig"], out) if config.get("thinkingConfig") is not None else False


def google_to_openai(body: Any, model: str, *, stream: bool) -> TranslatedGoogle:
    """The chat-completions request equivalent to a Gemini `generateContent` request for `model` (from the
    path). `safetySettings`, `labels` and unknown keys are dropped; `cachedContent` is refused (it lives at
    Google)."""
    want(body, dict, "body", "a JSON object")
    if body.get("cachedContent") is not None:
        raise fail("cachedContent", "this gateway keeps no cached contents; send the whole conversation in `contents`")
    out: dict[str, Any] = {"model": model, "messages": _messages(body)}
    if body.get("tools"):
        out["tools"] = tools(body["tools"])
    if body.get("toolConfig") is not None and out.get("tools"):  # chat completions refuse it without tools
        choice = tool_choice(body["toolConfig"])
        if choice is not None:
            out["tool_choice"] = choice
    include_thoughts = _generation(body["generationConfig"], out) if body.get("generationConfig") is not None else False
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return TranslatedGoogle(out, include_thoughts)
