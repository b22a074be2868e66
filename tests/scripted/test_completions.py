"""The scripted model's `/v1/completions` with token-id prompts, as vLLM answers it: the prompt read back into a
conversation, the answer as text with legacy logprobs, `token_ids` and `prompt_token_ids`, unary and streamed."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from agentbake.scripted import Reply, ScriptedModel
from agentbake.scripted.completions import chat_of
from agentbake.serve import serve_in_thread

CAPTURE = {"return_tokens_as_token_ids": True, "return_token_ids": True, "skip_special_tokens": False}
BASH = {
    "type": "function",
    "function": {"name": "Bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}
CONVERSATION = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": "Listing.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt"},
]


def test_a_token_prompt_is_read_back_into_the_conversation_the_template_rendered(served) -> None:
    model, _ = served
    rendered = model.vocab._render({"messages": CONVERSATION, "tools": [BASH]}, generation_prompt=True)
    chat = chat_of(rendered)
    assert chat["tools"] == [BASH]
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [(m["role"], m["content"]) for m in CONVERSATION]
    assert chat["messages"][2]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": '{"command": "ls"}'}
    assert chat["messages"][3]["tool_call_id"] == chat["messages"][2]["tool_calls"][0]["id"]


def test_unary_and_stream_answer_a_token_prompt_with_the_same_text_and_ids(served) -> None:
    model, client = served
    prompt = model.render_prompt({"messages": CONVERSATION, "tools": [BASH]})
    seen: list[dict] = []
    model.responder = lambda request: (
        seen.append(request) or Reply(text="Two.", tool_calls=[("Bash", {"command": "wc"})])
    )
    unary = client.completions.create(model="m", prompt=prompt, max_tokens=50, logprobs=2, extra_body=CAPTURE)
    chunks = list(
        client.completions.create(model="m", prompt=prompt, max_tokens=50, logprobs=2, stream=True, extra_body=CAPTURE)
    )
    # The policy got the conversation the ids hold.
    assert [m["role"] for m in seen[0]["messages"]] == ["system", "user", "assistant", "tool"]
    assert seen[0]["tools"] == [BASH]

    choice = unary.choices[0]
    assert choice.text == 'Two.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "wc"}}\n</tool_call>'
    assert choice.finish_reason == "stop"  # the completions route parses no tool calls
    extra = choice.model_extra
    assert extra["prompt_token_ids"] == prompt and extra["token_ids"] == model.emitted[0]
    assert extra["token_ids"][-1] == model.vocab.end_token().id  # the end-of-sequence id, never in the text
    assert choice.logprobs.tokens == [f"token_id:{i}" for i in extra["token_ids"]]
    assert len(choice.logprobs.token_logprobs) == len(extra["token_ids"])
    for token, top in zip(choice.logprobs.tokens, choice.logprobs.top_logprobs, strict=True):
        assert next(iter(top)) == token and len(top) == 3  # the sampled token first, then 2 alternatives

    streamed = [c.choices[0] for c in chunks if c.choices]
    assert "".join(c.text for c in streamed) == choice.text
    assert [i for c in streamed for i in c.model_extra["token_ids"]] == extra["token_ids"]
    assert streamed[0].model_extra["prompt_token_ids"] == prompt
    assert all("prompt_token_ids" not in c.model_extra for c in streamed[1:])
    assert [c.finish_reason for c in streamed] == [None] * (len(streamed) - 1) + ["stop"]
    assert [lp for c in streamed for lp in c.logprobs.token_logprobs] == choice.logprobs.token_logprobs


def test_special_tokens_leave_the_text_unless_asked_to_stay(served) -> None:
    model, client = served
    prompt = model.render_prompt({"messages": CONVERSATION[:2], "tools": [BASH]})
    model.responder = lambda request: Reply(text="", tool_calls=[("Bash", {"command": "ls"})])
    text = client.completions.create(model="m", prompt=prompt, max_tokens=50).choices[0].text
    assert text == '\n{"name": "Bash", "arguments": {"command": "ls"}}\n'  # <tool_call> is a special token here


def test_the_toy_vocabulary_cannot_read_a_token_prompt(tmp_path: Path) -> None:
    with serve_in_thread(ScriptedModel(), log_level="critical") as app:
        client = openai.OpenAI(base_url=app.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="no tokenizer to read a completions prompt"):
            client.completions.create(model="m", prompt=[1, 2, 3], max_tokens=5)
        with pytest.raises(openai.BadRequestError, match="expected one prompt"):
            client.completions.create(model="m", prompt=[[1, 2], [3]], max_tokens=5)


def test_characters_split_over_tokens_come_whole_and_offsets_follow_the_text(served) -> None:
    model, client = served
    prompt = model.render_prompt({"messages": CONVERSATION[:2]})
    text = "Ünïcode 漢字 and an emoji 🙂 split over byte-level tokens. " * 3
    model.responder = lambda request: Reply(text=text)
    unary = client.completions.create(model="m", prompt=prompt, max_tokens=500, logprobs=0, extra_body=CAPTURE)
    chunks = list(
        client.completions.create(model="m", prompt=prompt, max_tokens=500, logprobs=0, stream=True, extra_body=CAPTURE)
    )
    assert unary.choices[0].text == text
    pieces = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(pieces) == text and not any("\ufffd" in piece for piece in pieces)
    offsets = unary.choices[0].logprobs.text_offset
    assert offsets == sorted(offsets) and offsets[0] == 0 and offsets[-1] <= len(text)
