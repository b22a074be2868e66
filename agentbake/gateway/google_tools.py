"""Gemini tools -> chat tools: `functionDeclarations`, their OpenAPI-subset schemas as JSON Schema, and
`toolConfig` as `tool_choice`. Pure functions over decoded JSON."""

from __future__ import annotations

from typing import Any

from agentbake.gateway.translate_request import clean_schema, fail, want

_MODES = {"AUTO": "auto", "VALIDATED": "auto", "MODE_UNSPECIFIED": "auto", "ANY": "required", "NONE": "none"}
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "not")
# Gemini-only keys that are no JSON Schema (`nullable` becomes a "null" type).
_GEMINI_ONLY = ("nullable", "propertyOrdering")


def json_schema(schema: Any) -> Any:
    """JSON Schema from Gemini's OpenAPI-subset schema: types lower-case (`OBJECT` -> `object`), `nullable`
    as a `null` type, `$schema`/`$id` removed; anything else kept."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            if value.upper() != "TYPE_UNSPECIFIED":
                out[key] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: json_schema(inner) for name, inner in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = json_schema(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [json_schema(inner) for inner in value]
        elif key not in _GEMINI_ONLY:
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return clean_schema(out)


def _function(declaration: Any, where: str) -> dict:
    """The chat function for one function declaration (`parameters`, or `parametersJsonSchema` as it is)."""
    want(declaration, dict, where, "a function declaration object")
    function: dict[str, Any] = {"name": want(declaration.get("name"), str, f"{where}.name", "a string")}
    if declaration.get("description") is not None:
        function["description"] = want(declaration["description"], str, f"{where}.description", "a string")
    if declaration.get("parametersJsonSchema") is not None:
        schema = want(declaration["parametersJsonSchema"], dict, f"{where}.parametersJsonSchema", "a JSON schema")
        function["parameters"] = clean_schema(schema)
    elif declaration.get("parameters") is not None:
        function["parameters"] = json_schema(want(declaration["parameters"], dict, f"{where}.parameters", "a schema"))
    else:
        function["parameters"] = {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def tools(value: Any) -> list[dict]:
    """Chat function tools for every `functionDeclarations` entry.

    Any other tool (googleSearch, codeExecution, ...) runs at Google and is a 400 naming it."""
    want(value, list, "tools", "an array of tools")
    out: list[dict] = []
    for i, tool in enumerate(value):
        want(tool, dict, f"tools[{i}]", "a tool object")
        for key, declarations in tool.items():
            where = f"tools[{i}].{key}"
            if key != "functionDeclarations":
                raise fail(
                    where,
                    "runs at Google, not on a chat-completions upstream: leave it out "
                    "(functionDeclarations are translated)",
                )
            want(declarations, list, where, "an array of function declarations")
            out += [_function(declaration, f"{where}[{j}]") for j, declaration in enumerate(declarations)]
    return out


def tool_choice(config: Any) -> str | dict | None:
    """`toolConfig.functionCallingConfig` as the chat `tool_choice`; None without a calling config.

    AUTO is auto, ANY is required (or the one function `allowedFunctionNames` names), NONE is none."""
    want(config, dict, "toolConfig", "an object")
    calling = config.get("functionCallingConfig")
    if calling is None:
        return None
    want(calling, dict, "toolConfig.functionCallingConfig", "an object")
    mode = want(calling.get("mode", "AUTO"), str, "toolConfig.functionCallingConfig.mode", "a string").upper()
    if mode not in _MODES:
        raise fail("toolConfig.functionCallingConfig.mode", f"unknown mode {mode!r} (AUTO, ANY, NONE are)")
    names = calling.get("allowedFunctionNames") or []
    want(names, list, "toolConfig.functionCallingConfig.allowedFunctionNames", "an array of strings")
    if mode == "ANY" and len(names) == 1:
        name = want(names[0], str, "toolConfig.functionCallingConfig.allowedFunctionNames[0]", "a string")
        return {"type": "function", "function": {"name": name}}
    return _MODES[mode]
