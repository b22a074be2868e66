"""vLLM's hermes tool-call parser's rules: JSON calls in `<tool_call>` tags."""

from __future__ import annotations

import pytest

from agentbake.gateway.tool_parse import ParsedCall
from agentbake.gateway.tool_parse_hermes import parse_hermes

CALL = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls -l", "note": "café"}}\n</tool_call>'


def test_text_without_a_tool_call_is_all_content() -> None:
    assert parse_hermes("Just text.\n") == ("Just text.\n", [])
    assert parse_hermes("") == ("", [])


def test_a_call_after_text_keeps_the_text_unstripped_and_writes_arguments_as_json_dumps() -> None:
    content, calls = parse_hermes("Let me look.\n" + CALL)
    assert content == "Let me look.\n"  # everything before the first <tool_call>, as sent
    # json.dumps(arguments, ensure_ascii=False): non-ASCII kept, ", " and ": " separators
    assert calls == [ParsedCall("Bash", '{"command": "ls -l", "note": "café"}')]


def test_a_call_alone_has_no_content_and_several_calls_keep_their_order() -> None:
    second = '<tool_call>\n{"name": "Read", "arguments": {"path": "a"}}\n</tool_call>'
    content, calls = parse_hermes(CALL + "\n" + second)
    assert content is None  # empty content is None
    assert [c.name for c in calls] == ["Bash", "Read"]


def test_a_last_call_left_open_is_parsed_to_the_end_of_the_text() -> None:
    content, calls = parse_hermes('Go.<tool_call>\n{"name": "Bash", "arguments": {"command": "pwd"}}\n')
    assert (content, calls) == ("Go.", [ParsedCall("Bash", '{"command": "pwd"}')])


@pytest.mark.parametrize(
    "broken",
    [
        '<tool_call>\n{"name": "Bash", "arguments": {"command": \n</tool_call>',  # not JSON
        '<tool_call>\n{"arguments": {}}\n</tool_call>',  # no name
        '<tool_call>\n{"name": "Bash"}\n</tool_call>',  # no arguments
    ],
)
def test_one_unparsable_call_makes_the_whole_text_content_and_no_call(broken: str) -> None:
    text = "Before. " + CALL + broken
    assert parse_hermes(text) == (text, [])
