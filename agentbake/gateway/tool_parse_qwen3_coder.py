"""vLLM's `qwen3_coder` tool-call parser (Qwen3-Coder): XML calls whose values the tool's JSON schema types.

    <tool_call>
    <function=NAME>
    <parameter=P>
    VALUE
    </parameter>
    </function>
    </tool_call>

A closing tag counts only where the format puts one: `</parameter>` before the next parameter, `</function>`,
`</tool_call>` or the end; `</tool_call>` before the next call or the end. So a value may hold these tags as text (code
that writes this format). Without any `<tool_call>`, a bare `<function=` still opens a call.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from agentbake.gateway.tool_parse import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ParsedCall, ToolParser

FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
PARAMETER_OPEN, PARAMETER_CLOSE = "<parameter=", "</parameter>"
_STRINGS = ("string", "str", "text", "varchar", "char", "enum")
_INTEGERS = ("int", "uint", "long", "short", "unsigned")
_NULLS = ("null", "none")
_NOT_IN_NAMES = frozenset("{}<>\"' \t\n\r")


def parse_qwen3_coder(text: str, tools: Any = None) -> tuple[str | None, list[ParsedCall]]:
    """(content, calls) of a text after its reasoning: content is what precedes the first call. Calls without a
    usable name are dropped; when none is left, or a value cannot be written as JSON, the whole text is content."""
    if FUNCTION_OPEN not in text:
        return text, []
    try:
        calls = [call for body in _function_bodies(text) if (call := _call(body, tools)) is not None]
    except (ValueError, TypeError, OverflowError, RecursionError):
        return text, []
    if not calls:
        return text, []
    return text[: _content_end(text)] or None, calls


def _function_bodies(text: str) -> list[str]:
    """What follows the `<function=` of each call, to the end of its `<tool_call>` (the text when it has none)."""
    blocks = []
    at = text.find(TOOL_CALL_OPEN)
    if at < 0:
        blocks.append(text)
    while at >= 0:
        start = at + len(TOOL_CALL_OPEN)
        end = _closing(text, TOOL_CALL_CLOSE, start, TOOL_CALL_OPEN)  # the call's own `</tool_call>`
        blocks.append(text[start:end] if end >= 0 else text[start:])
        at = text.find(TOOL_CALL_OPEN, end + len(TOOL_CALL_CLOSE)) if end >= 0 else -1
    return [block[block.find(FUNCTION_OPEN) + len(FUNCTION_OPEN) :] for block in blocks if FUNCTION_OPEN in block]


def _closing(text: str, tag: str, start: int, then: str) -> int:
    """The first `tag` from `start` followed by nothing but whitespace, or by `then`: the one the format puts there;
    -1 when there is none."""
    at = text.find(tag, start)
    while at >= 0:
        after = text[at + len(tag) :].lstrip()
        if not after or after.startswith(then):
            return at
        at = text.find(tag, at + 1)
    return -1


def _content_end(text: str) -> int:
    """Where content ends: at the first `<tool_call>` holding a `<function=`, else at the first `<function=`."""
    at = text.find(TOOL_CALL_OPEN)
    while at >= 0:
        start = at + len(TOOL_CALL_OPEN)
        close = text.find(TOOL_CALL_CLOSE, start)
        if text.find(FUNCTION_OPEN, start, close if close >= 0 else len(text)) >= 0:
            return at
        at = text.find(TOOL_CALL_OPEN, close) if close >= 0 else -1
    return text.find(FUNCTION_OPEN)


def _call(body: str, tools: Any) -> ParsedCall | None:
    """The call of a function's text (`NAME>` then its parameters); None when it names no function."""
    name_end = body.find(">")
    name = body[:name_end]
    if name_end <= 0 or not _NOT_IN_NAMES.isdisjoint(name):
        return None
    schema = _properties(tools, name)
    known = set(schema) or None
    rest = body[name_end + 1 :]
    arguments: dict[str, Any] = {}
    pos = 0
    while (start := _parameter_start(rest, pos)) >= 0:
        closing = rest.find(FUNCTION_CLOSE, pos)
        if 0 <= closing < start:
            break
        key_end = rest.find(">", start + len(PARAMETER_OPEN))
        if key_end < 0:
            break
        key, value_at = rest[start + len(PARAMETER_OPEN) : key_end], key_end + 1
        value = rest[value_at:]
        end = _parameter_end(value, known)
        if end >= 0:
            pos = value_at + end + len(PARAMETER_CLOSE)
        elif (end := _parameter_start(value, 0, known)) >= 0:  # a missing `</parameter>`: the next one ends it
            pos = value_at + end
        else:
            closed = _closing(value, FUNCTION_CLOSE, 0, TOOL_CALL_CLOSE)  # left open: to `</function>`, else the end
            end, pos = (closed if closed >= 0 else len(value)), len(rest)
        arguments[key] = _convert(value[:end].removeprefix("\n").removesuffix("\n"), key, schema)
    return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))


def _parameter_start(text: str, pos: int, known: set[str] | None = None) -> int:
    """The next `<parameter=` from `pos` that opens a line (and names one of `known`, if given); -1 if none."""
    at = text.find(PARAMETER_OPEN, pos)
    while at >= 0:
        if at == 0 or text[at - 1] == "\n":
            name_end = text.find(">", at + len(PARAMETER_OPEN))
            if known is None or (name_end >= 0 and text[at + len(PARAMETER_OPEN) : name_end] in known):
                return at
        at = text.find(PARAMETER_OPEN, at + 1)
    return -1


def _parameter_end(value: str, known: set[str] | None) -> int:
    """Where the `</parameter>` closing a value is, nested `<parameter=`...`</parameter>` pairs skipped; -1 if none."""
    depth = pos = 0
    while (close := value.find(PARAMETER_CLOSE, pos)) >= 0:
        opening = _parameter_start(value, pos)
        if 0 <= opening < close:
            depth, pos = depth + 1, opening + len(PARAMETER_OPEN)
            continue
        pos = close + len(PARAMETER_CLOSE)
        if depth:
            depth -= 1
            continue
        after = value[pos:].lstrip()
        if not after or after.startswith((FUNCTION_CLOSE, TOOL_CALL_CLOSE)) or _parameter_start(after, 0, known) == 0:
            return close
    return -1


def _properties(tools: Any, name: str) -> dict[str, Any]:
    """The schema properties of the request's function `name` ({} when it has none or is not among the tools)."""
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if isinstance(function, dict) and function.get("name") == name:
            parameters = function.get("parameters")
            properties = parameters.get("properties", parameters) if isinstance(parameters, dict) else None
            return properties if isinstance(properties, dict) else {}
    return {}


def _type_of(spec: Any) -> tuple[str, bool]:
    """(type name, whether null is allowed) of a property's schema; `anyOf` gives its first type that is not null."""
    if not isinstance(spec, dict):
        return "string", False
    if "type" in spec:
        kind = str(spec["type"]).strip().lower()
        return kind, kind == "null"
    options = [str(o["type"]).strip().lower() for o in spec.get("anyOf") or [] if isinstance(o, dict) and "type" in o]
    kinds = [kind for kind in options if kind != "null"]
    return (kinds[0] if kinds else "string"), len(kinds) < len(options)


def _convert(value: str, key: str, schema: dict[str, Any]) -> Any:
    """A parameter's value as its schema's type makes it; the text itself when it does not parse as that type."""
    if key not in schema:
        return value
    kind, nullable = _type_of(schema[key])
    if nullable and value.lower() in _NULLS:
        return None
    if kind in _STRINGS:
        return value
    if value.lower() in _NULLS:
        return None
    if kind.startswith(_INTEGERS):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if number - int(number) != 0 else int(number)  # inf: OverflowError, no calls (as vLLM)
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    container = kind in ("object", "array", "arr") or kind.startswith(("dict", "list"))
    if container:
        try:
            return _literal_if_text(json.loads(value))
        except ValueError:
            pass
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError):
        return value
    return _literal_if_text(parsed) if container else parsed


def _literal_if_text(value: Any) -> Any:
    """A container value that came out as text (a Python repr written as a JSON string), read once more."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError):
            pass
    return value


QWEN3_CODER = ToolParser("qwen3_coder", (TOOL_CALL_OPEN, FUNCTION_OPEN), parse_qwen3_coder)
