"""vLLM's qwen3_coder tool-call parser's rules (the scenarios of vLLM's own tests): XML calls, values typed by the
tool's schema, content before the calls, malformed calls."""

from __future__ import annotations

import json

import pytest

from agentbake.gateway.tool_parse_qwen3_coder import parse_qwen3_coder


def tool(name: str, properties: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties}}}


TOOLS = [
    tool(
        "get_current_weather", {"city": {"type": "string"}, "state": {"type": "string"}, "unit": {"enum": ["f", "c"]}}
    ),
    tool(
        "calculate_area",
        {"shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}},
    ),
    tool("measure", {"length": {"type": "number"}}),
]


def xml_call(name: str, **values: str) -> str:
    parameters = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in values.items())
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


XML_CALL = xml_call("get_current_weather", city="Dallas", state="TX", unit="fahrenheit")
WEATHER = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}


def parsed(text: str, tools: list | None = TOOLS) -> tuple[str | None, list[tuple[str, object]]]:
    content, calls = parse_qwen3_coder(text, tools)
    return content, [(call.name, json.loads(call.arguments)) for call in calls]


def test_text_without_a_function_is_all_content() -> None:
    assert parsed("This is a test response without any tool calls") == (
        "This is a test response without any tool calls",
        [],
    )
    assert parsed("<tool_call>\nno function here\n</tool_call>") == ("<tool_call>\nno function here\n</tool_call>", [])


def test_one_call_alone_has_no_content_and_text_before_it_is_content_unstripped() -> None:
    assert parsed(XML_CALL) == (None, [("get_current_weather", WEATHER)])
    assert parsed("Sure! Let me check.\n" + XML_CALL) == ("Sure! Let me check.\n", [("get_current_weather", WEATHER)])


def test_parallel_calls_keep_their_order() -> None:
    second = xml_call("get_current_weather", city="Orlando", state="FL", unit="celsius")
    _, calls = parsed(XML_CALL + "\n" + second)
    assert [arguments["city"] for _, arguments in calls] == ["Dallas", "Orlando"]


def test_values_take_the_schemas_types_strings_stay_raw() -> None:
    text = xml_call("calculate_area", shape="rectangle", dimensions='{"width": 10, \n "height": 20}', precision="2")
    assert parsed(text)[1] == [
        ("calculate_area", {"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2})
    ]
    types = tool(
        "types",
        {
            "i": {"type": "integer"},
            "f": {"type": "float"},
            "whole": {"type": "number"},
            "b": {"type": "boolean"},
            "s": {"type": "string"},
            "o": {"type": "object"},
            "a": {"type": "array"},
            "n": {"type": "integer"},
            "s_null": {"type": "string"},
            "opt_int": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "opt_str": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "listed": {"type": ["integer", "null"]},
            "repr": {"type": "object"},
        },
    )
    values = {
        "i": "42",
        "f": "3.14",
        "whole": "5.0",
        "b": "True",
        "s": "  007 keeps its spaces  ",
        "o": '{"key": "value"}',
        "a": "['x', 1]",  # not JSON: read as a Python literal
        "n": "null",
        "s_null": "null",  # a string stays the text "null"
        "opt_int": "7",
        "opt_str": "None",  # nullable: null
        "listed": "42",
        "repr": "\"{'k': 'v'}\"",  # a Python repr written as a JSON string
    }
    assert parsed(xml_call("types", **values), [types])[1] == [
        (
            "types",
            {
                "i": 42,
                "f": 3.14,
                "whole": 5,
                "b": True,
                "s": "  007 keeps its spaces  ",
                "o": {"key": "value"},
                "a": ["x", 1],
                "n": None,
                "s_null": "null",
                "opt_int": 7,
                "opt_str": None,
                "listed": 42,
                "repr": {"k": "v"},
            },
        )
    ]


def test_values_that_do_not_parse_as_their_type_stay_text() -> None:
    schema = tool(
        "t", {"i": {"type": "integer"}, "f": {"type": "number"}, "b": {"type": "bool"}, "o": {"type": "object"}}
    )
    values = {"extra": "42", "i": "forty", "f": "nan?", "b": "yes", "o": "{not json"}
    assert parsed(xml_call("t", **values), [schema])[1] == [
        ("t", {"extra": "42", "i": "forty", "f": "nan?", "b": False, "o": "{not json"})  # undeclared: text
    ]
    # A function the request does not declare: every value is text.
    assert parsed(xml_call("unknown", count="3"))[1] == [("unknown", {"count": "3"})]


def test_calls_without_tool_call_tags_or_left_open_are_still_read() -> None:
    bare = "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n</function>"
    assert parsed("Checking: " + bare) == ("Checking: ", [("get_current_weather", {"city": "Dallas"})])
    cut = "Go.<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDal"
    assert parsed(cut) == ("Go.", [("get_current_weather", {"city": "Dal"})])


def test_a_missing_closing_parameter_tag_ends_at_the_next_parameter() -> None:
    text = XML_CALL.replace("Dallas\n</parameter>", "Dallas")
    assert parsed("Let me check:\n" + text) == ("Let me check:\n", [("get_current_weather", WEATHER)])


def test_a_value_may_hold_the_formats_own_tags_as_text() -> None:
    code = 'print("</parameter>")\nx = "</tool_call> and </function>"'
    text = xml_call("write", path="a.py", content=code) + "\n" + xml_call("write", path="b.py", content="ok")
    assert parsed(text)[1] == [
        ("write", {"path": "a.py", "content": code}),
        ("write", {"path": "b.py", "content": "ok"}),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Look: <tool_call>\n<function={{ tool.name }}>\n</function>\n</tool_call>",  # a template never rendered
        "Look: <function=no closing bracket",
        "Look: <tool_call>\n<function=measure>\n<parameter=length>\n1e999\n</parameter>\n</function>",
        "Look: <tool_call>\n<function=calculate_area>\n<parameter=dimensions>\n{1, 2}\n</parameter>\n</function>",
    ],
    ids=["template-name", "no-name-end", "infinite-number", "set-not-json"],
)
def test_text_that_makes_no_usable_call_stays_content(text: str) -> None:
    assert parsed(text) == (text, [])
