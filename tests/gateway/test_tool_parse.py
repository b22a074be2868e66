"""Completion text parsed as vLLM 0.34's chat route parses it (hermes tool parser, Qwen3 reasoning parser), and the
token-in stream converter agreeing with that parse whatever the chunking."""

from __future__ import annotations

import json

import pytest

from agentbake.gateway.token_in_answer import CompletionAnswer, chat_logprobs
from agentbake.gateway.tool_parse import ParsedCall, parse_completion, parse_tool_calls, split_reasoning

CALL = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls -l", "note": "café"}}\n</tool_call>'


def test_text_without_a_tool_call_is_all_content() -> None:
    assert parse_tool_calls("Just text.\n") == ("Just text.\n", [])
    assert parse_tool_calls("") == ("", [])


def test_a_call_after_text_keeps_the_text_unstripped_and_writes_arguments_as_json_dumps() -> None:
    content, calls = parse_tool_calls("Let me look.\n" + CALL)
    assert content == "Let me look.\n"  # everything before the first <tool_call>, as sent
    # json.dumps(arguments, ensure_ascii=False): non-ASCII kept, ", " and ": " separators
    assert calls == [ParsedCall("Bash", '{"command": "ls -l", "note": "café"}')]


def test_a_call_alone_has_no_content_and_several_calls_keep_their_order() -> None:
    second = '<tool_call>\n{"name": "Read", "arguments": {"path": "a"}}\n</tool_call>'
    content, calls = parse_tool_calls(CALL + "\n" + second)
    assert content is None  # empty content is None
    assert [c.name for c in calls] == ["Bash", "Read"]


def test_a_last_call_left_open_is_parsed_to_the_end_of_the_text() -> None:
    content, calls = parse_tool_calls('Go.<tool_call>\n{"name": "Bash", "arguments": {"command": "pwd"}}\n')
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
    assert parse_tool_calls(text) == (text, [])


def test_reasoning_runs_from_think_or_from_a_prompt_that_opened_it_to_its_end() -> None:
    assert split_reasoning("<think>plan</think>\n\nAnswer") == ("plan", "\n\nAnswer")
    assert split_reasoning("<think>cut short") == ("cut short", "")  # never closed: a thought cut short
    assert split_reasoning("no reasoning</think>") == (None, "no reasoning</think>")
    # A template that opens <think> in the generation prompt (Qwen3.5): the answer starts in its reasoning.
    assert split_reasoning("plan</think>\n\nAnswer", opened=True) == ("plan", "\n\nAnswer")
    assert split_reasoning("<think>plan</think>Answer", opened=True) == ("plan", "Answer")
    assert split_reasoning("cut short", opened=True) == ("cut short", "")
    parsed = parse_completion("<think>a plan</think>Now." + CALL)
    assert (parsed.reasoning, parsed.content, [c.name for c in parsed.tool_calls]) == ("a plan", "Now.", ["Bash"])
    assert parse_completion("only thinking</think>", opened=True).content is None


def test_legacy_logprobs_become_chat_entries_in_the_servers_order() -> None:
    legacy = {
        "tokens": ["token_id:5", "token_id:9"],
        "token_logprobs": [-0.5, None],
        "top_logprobs": [{"token_id:5": -0.5, "token_id:2": -1.5}, {"token_id:9": None}],
        "text_offset": [0, 2],
    }
    entries = chat_logprobs(legacy)["content"]
    assert [e["token"] for e in entries] == ["token_id:5", "token_id:9"]
    assert [e["logprob"] for e in entries] == [-0.5, None]  # null stays unknown, never 0.0
    assert [t["token"] for t in entries[0]["top_logprobs"]] == ["token_id:5", "token_id:2"]
    assert chat_logprobs(None) is None


TEXTS = [
    "Plain answer, no calls.",
    "<think>First think.</think>\n\nThen say." + CALL,
    "Text then " + CALL + "\n" + CALL.replace("Bash", "Other"),
    "Looks like a call <tool_call>\n{broken json\n</tool_call> but is not",
    "<thi not a think marker",
    "<think>a thought cut short",
    "thought in an opened think</think>\n\nThen answer." + CALL,
    "ends with a partial marker <tool_",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("size", [1, 3, 7, 1000])
@pytest.mark.parametrize("opened", [False, True], ids=["plain", "opened-think"])
def test_the_stream_shows_what_the_unary_parse_gives_whatever_the_chunking(text: str, size: int, opened: bool) -> None:
    pieces = [text[i : i + size] for i in range(0, len(text), size)] + ["<|im_end|>"]
    stream = CompletionAnswer("<|im_end|>", opened=opened)
    out = []
    for n, piece in enumerate(pieces):
        final = n == len(pieces) - 1
        chunk = {"id": "cmpl-1", "choices": [{"index": 0, "text": piece, "finish_reason": "stop" if final else None}]}
        out += stream.chunk(chunk)
    deltas = [c["choices"][0]["delta"] for c in out]
    content = "".join(d.get("content") or "" for d in deltas)
    reasoning = "".join(d.get("reasoning") or "" for d in deltas)
    calls = [call for d in deltas for call in d.get("tool_calls") or []]

    unary = CompletionAnswer("<|im_end|>", opened=opened).unary(
        {"id": "cmpl-1", "choices": [{"index": 0, "text": text + "<|im_end|>", "finish_reason": "stop"}]}
    )
    message = unary["choices"][0]["message"]
    assert content == (message["content"] or "")
    assert reasoning == (message.get("reasoning") or "")
    assert [(c["id"], c["function"]) for c in calls] == [
        (c["id"], c["function"]) for c in message.get("tool_calls", [])
    ]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        json.loads(c["function"]["arguments"]) for c in message.get("tool_calls", [])
    ]
    finish = out[-1]["choices"][0]["finish_reason"]
    assert finish == unary["choices"][0]["finish_reason"] == ("tool_calls" if calls else "stop")


def test_a_stream_that_ends_without_a_finish_reason_still_gets_its_held_back_calls() -> None:
    stream = CompletionAnswer("<|im_end|>")
    out = stream.chunk({"id": "cmpl-2", "choices": [{"index": 0, "text": "Go." + CALL, "finish_reason": None}]})
    assert [c["choices"][0]["delta"] for c in out] == [{"content": "Go."}]  # the call is held back
    *_, last = stream.end()
    (call,) = last["choices"][0]["delta"]["tool_calls"]
    assert call["function"]["name"] == "Bash" and last["id"] == "cmpl-2"
    assert last["choices"][0]["finish_reason"] is None  # none came; none is made up
    assert stream.end() == []
