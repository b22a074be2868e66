"""Completion text parsed as vLLM 0.34's chat route parses it (Qwen3 reasoning parser, each tool-call parser), and the
token-in stream converter agreeing with that parse whatever the chunking."""

from __future__ import annotations

import json

import pytest

from agentbake.gateway.token_in_answer import CompletionAnswer, chat_logprobs
from agentbake.gateway.tool_parse import ToolParser, parse_completion, split_reasoning
from agentbake.gateway.tool_parse_hermes import HERMES
from agentbake.gateway.tool_parse_qwen3_coder import QWEN3_CODER

from .test_tool_parse_hermes import CALL
from .test_tool_parse_qwen3_coder import TOOLS, XML_CALL


def test_reasoning_runs_from_think_or_from_a_prompt_that_opened_it_to_its_end() -> None:
    assert split_reasoning("<think>plan</think>\n\nAnswer") == ("plan", "\n\nAnswer")
    assert split_reasoning("<think>cut short") == ("cut short", "")  # never closed: a thought cut short
    assert split_reasoning("no reasoning</think>") == (None, "no reasoning</think>")
    # A template that opens <think> in the generation prompt (Qwen3.5): the answer starts in its reasoning.
    assert split_reasoning("plan</think>\n\nAnswer", opened=True) == ("plan", "\n\nAnswer")
    assert split_reasoning("<think>plan</think>Answer", opened=True) == ("plan", "Answer")
    assert split_reasoning("cut short", opened=True) == ("cut short", "")
    parsed = parse_completion("<think>a plan</think>Now." + CALL, HERMES)
    assert (parsed.reasoning, parsed.content, [c.name for c in parsed.tool_calls]) == ("a plan", "Now.", ["Bash"])
    assert parse_completion("only thinking</think>", HERMES, opened=True).content is None


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


HERMES_TEXTS = [
    "Plain answer, no calls.",
    "<think>First think.</think>\n\nThen say." + CALL,
    "Text then " + CALL + "\n" + CALL.replace("Bash", "Other"),
    "Looks like a call <tool_call>\n{broken json\n</tool_call> but is not",
    "<thi not a think marker",
    "<think>a thought cut short",
    "thought in an opened think</think>\n\nThen answer." + CALL,
    "ends with a partial marker <tool_",
]
QWEN3_CODER_TEXTS = [
    "Plain answer, no calls.",
    "<think>First think.</think>\n\nThen say." + XML_CALL + "\n" + XML_CALL.replace("Dallas", "Austin"),
    "Bare: <function=measure>\n<parameter=length>\n2.5\n</parameter>\n</function>",
    "A bare tag <tool_call>\nnot a call\n</tool_call>, then one:" + XML_CALL,
    "A template token <function={{ name }}> is no call",
    "ends with a partial marker <funct",
]
CASES = [(HERMES, text) for text in HERMES_TEXTS] + [(QWEN3_CODER, text) for text in QWEN3_CODER_TEXTS]


@pytest.mark.parametrize(("parser", "text"), CASES)
@pytest.mark.parametrize("size", [1, 3, 7, 1000])
@pytest.mark.parametrize("opened", [False, True], ids=["plain", "opened-think"])
def test_the_stream_shows_what_the_unary_parse_gives_whatever_the_chunking(
    parser: ToolParser, text: str, size: int, opened: bool
) -> None:
    pieces = [text[i : i + size] for i in range(0, len(text), size)] + ["<|im_end|>"]
    stream = CompletionAnswer("<|im_end|>", parser, TOOLS, opened=opened)
    out = []
    for n, piece in enumerate(pieces):
        final = n == len(pieces) - 1
        chunk = {"id": "cmpl-1", "choices": [{"index": 0, "text": piece, "finish_reason": "stop" if final else None}]}
        out += stream.chunk(chunk)
    deltas = [c["choices"][0]["delta"] for c in out]
    content = "".join(d.get("content") or "" for d in deltas)
    reasoning = "".join(d.get("reasoning") or "" for d in deltas)
    calls = [call for d in deltas for call in d.get("tool_calls") or []]

    unary = CompletionAnswer("<|im_end|>", parser, TOOLS, opened=opened).unary(
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
    stream = CompletionAnswer("<|im_end|>", HERMES)
    out = stream.chunk({"id": "cmpl-2", "choices": [{"index": 0, "text": "Go." + CALL, "finish_reason": None}]})
    assert [c["choices"][0]["delta"] for c in out] == [{"content": "Go."}]  # the call is held back
    *_, last = stream.end()
    (call,) = last["choices"][0]["delta"]["tool_calls"]
    assert call["function"]["name"] == "Bash" and last["id"] == "cmpl-2"
    assert last["choices"][0]["finish_reason"] is None  # none came; none is made up
    assert stream.end() == []
