"""Anthropic <-> OpenAI translation: fixed cases and properties over arbitrary shapes."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbake.gateway.errors import InvalidRequest
from agentbake.gateway.stream import completion_as_chunk
from agentbake.gateway.translate_request import anthropic_to_openai, clean_schema
from agentbake.gateway.translate_response import StreamTranslator, openai_to_anthropic

# ------------------------------------------------------------------ fixed cases


def translate(messages, **extra):
    return anthropic_to_openai({"model": "m", "max_tokens": 5, "messages": messages, **extra})


def test_images_documents_and_tool_references():
    out = translate(
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}},
                    {"type": "document", "title": "notes", "source": {"type": "text", "data": "doc body"}},
                    {"type": "text", "text": "look"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
                    }
                ],
            },
        ]
    )
    parts = out["messages"][0]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert parts[1] == {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}}
    assert parts[2] == {"type": "text", "text": "notes\n\ndoc body"}
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "Tool loaded: WebFetch"}


def test_image_inside_a_tool_result_follows_as_a_user_message():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QQ=="}}
    out = translate(
        [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "s", "name": "Shot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "s", "content": [image]}]},
        ]
    )
    assert out["messages"][1] == {"role": "tool", "tool_call_id": "s", "content": ""}
    assert out["messages"][2]["content"][0]["type"] == "image_url"


def test_pdf_document_is_refused_with_a_clear_message():
    doc = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "x"}}
    with pytest.raises(InvalidRequest, match=r"messages\[0\]\.content\[0\]\.source\.type: document source 'base64'"):
        translate([{"role": "user", "content": [doc]}])


def test_tool_choice_tools_and_sampling_fields():
    tools = [
        {"name": "a", "description": "A", "input_schema": {"type": "object"}, "defer_loading": True},
        {"type": "web_search_20250305", "name": "web_search"},  # a server tool: not forwardable
    ]
    out = translate(
        [{"role": "user", "content": "x"}],
        tools=tools,
        tool_choice={"type": "tool", "name": "a", "disable_parallel_tool_use": True},
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        stop_sequences=["X"],
        stream=True,
    )
    assert out["tools"] == [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}, "description": "A"}}
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "a"}}
    assert out["parallel_tool_calls"] is False
    assert (out["temperature"], out["top_p"], out["top_k"], out["stop"]) == (0.5, 0.9, 20, ["X"])
    assert out["stream_options"] == {"include_usage": True}
    for kind, expected in (("auto", "auto"), ("any", "required"), ("none", "none")):
        assert translate([], tool_choice={"type": kind})["tool_choice"] == expected


def test_thinking_and_output_config_mapping():
    disabled = translate([], thinking={"type": "disabled"})
    assert disabled["chat_template_kwargs"] == {"enable_thinking": False}
    adaptive = translate([], thinking={"type": "adaptive"}, output_config={"effort": "max"})
    assert "chat_template_kwargs" not in adaptive and adaptive["reasoning_effort"] == "high"
    schema = {"$schema": "x", "type": "object"}
    structured = translate([], output_config={"format": {"type": "json_schema", "schema": schema}})
    assert structured["response_format"]["json_schema"]["schema"] == {"type": "object"}


def test_system_as_string_and_billing_header_kept_when_asked():
    billing = {"type": "text", "text": "x-anthropic-billing-header: cc_version=1"}
    kept = anthropic_to_openai(
        {"model": "m", "system": [billing, {"type": "text", "text": "s"}], "messages": []},
        drop_billing_header=False,
    )
    assert kept["messages"][0]["content"].startswith("x-anthropic-billing-header")
    only_billing = anthropic_to_openai({"model": "m", "system": [billing], "messages": []})
    assert only_billing["messages"] == []
    assert translate([], system="plain")["messages"] == [{"role": "system", "content": "plain"}]


@pytest.mark.parametrize(
    ("messages", "extra", "message"),
    [
        ([{"role": "user"}], {}, "messages[0].content: missing"),
        (
            [{"role": "user", "content": [{"text": "no type"}]}],
            {},
            "messages[0].content[0].type: missing block type",
        ),
        (
            [{"role": "user", "content": ["bare string"]}],
            {},
            "messages[0].content[0]: expected a content block object",
        ),
        (
            [{"role": "assistant", "content": [{"type": "image"}]}],
            {},
            "unknown content block type 'image' in an assistant",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": 3}]}],
            {},
            "messages[0].content[0].text: expected a string",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}],
            {},
            "is_error: expected a boolean",
        ),
        (
            [],
            {"tools": [{"name": "t", "input_schema": []}]},
            "tools[0].input_schema: expected a JSON schema object",
        ),
        (
            [],
            {"tool_choice": {"type": "sometimes"}},
            "tool_choice.type: unknown tool_choice type 'sometimes'",
        ),
        ([], {"temperature": True}, "temperature: expected a number, got boolean"),
        ([], {"stop_sequences": [1]}, "stop_sequences[0]: expected a string"),
        ([], {"system": [{"type": "image"}]}, "system[0].type: expected a text block"),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
            {},
            "unsupported image source",
        ),
    ],
)
def test_wrong_shapes_name_the_path(messages, extra, message):
    with pytest.raises(InvalidRequest) as caught:
        translate(messages, **extra)
    assert message in caught.value.message


def test_unary_response_without_tool_id_and_broken_arguments():
    response = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "reasoning": "hmm",
                    "tool_calls": [
                        {"function": {"name": "a", "arguments": "{broken"}},
                        {"id": "x", "function": {"name": "b", "arguments": "[1]"}},
                    ],
                },
                "finish_reason": "stop",
            }
        ]
    }
    message = openai_to_anthropic(response, model="c", stop_sequences=[], taken_ids={"x"})
    thinking, first, second = message["content"]
    assert thinking == {"type": "thinking", "thinking": "hmm", "signature": ""}
    assert first["id"].startswith("toolu_") and first["input"] == {}
    assert second["id"].startswith("toolu_") and second["id"] != "x"  # "x" was already in the conversation
    assert message["stop_reason"] == "tool_use" and message["usage"]["input_tokens"] == 0


def test_stream_translator_tool_call_without_arguments_gets_an_empty_object():
    translator = StreamTranslator(model="c", stop_sequences=[])
    events = translator.feed(
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "t"}}]}}]}
    )
    events += translator.finish()
    deltas = [d["delta"] for name, d in events if name == "content_block_delta"]
    assert deltas == [{"type": "input_json_delta", "partial_json": "{}"}]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_clean_schema_is_recursive():
    schema = {
        "$schema": "s",
        "properties": {"a": {"$id": "i", "type": "string"}},
        "anyOf": [{"$schema": "t"}],
    }
    assert clean_schema(schema) == {"properties": {"a": {"type": "string"}}, "anyOf": [{}]}


# ------------------------------------------------------------------ properties

text = st.text(max_size=30)
cache = st.one_of(st.none(), st.just({"type": "ephemeral"}))
tool_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=8,
)
tool_inputs = st.dictionaries(text, json_values, max_size=4)


def _with_cache(block: dict, marker: dict | None) -> dict:
    return {**block, "cache_control": marker} if marker else block


@st.composite
def text_block(draw):
    return _with_cache({"type": "text", "text": draw(text)}, draw(cache))


@st.composite
def image_block(draw):
    if draw(st.booleans()):
        source = {"type": "base64", "media_type": "image/png", "data": draw(st.text("ABCD=", max_size=8))}
    else:
        source = {"type": "url", "url": "https://example.test/" + draw(tool_ids)}
    return {"type": "image", "source": source}


@st.composite
def tool_result_block(draw, tool_id):
    content = draw(st.one_of(text, st.lists(text_block(), max_size=3)))
    block = {"type": "tool_result", "tool_use_id": tool_id, "content": content}
    if draw(st.booleans()):
        block["is_error"] = draw(st.booleans())
    return _with_cache(block, draw(cache))


@st.composite
def conversation(draw):
    """Alternating user/assistant turns where every tool_use is answered by a tool_result."""
    messages = []
    pending: list[str] = []
    counter = 0
    for _ in range(draw(st.integers(1, 5))):
        user_blocks = [draw(tool_result_block(tool_id)) for tool_id in pending]
        user_blocks += draw(st.lists(st.one_of(text_block(), image_block()), max_size=3))
        if not user_blocks:
            user_blocks = [{"type": "text", "text": "x"}]
        content = user_blocks if pending or draw(st.booleans()) else draw(text)
        messages.append({"role": "user", "content": content})
        if draw(st.booleans()):
            messages.append({"role": "system", "content": draw(st.one_of(text, st.lists(text_block(), max_size=2)))})
        pending = []
        blocks = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": draw(text), "signature": "sig"})
        blocks += draw(st.lists(text_block(), max_size=2))
        for _ in range(draw(st.integers(0, 2))):
            counter += 1
            tool_id = f"{draw(tool_ids)}_{counter}"
            pending.append(tool_id)
            blocks.append({"type": "tool_use", "id": tool_id, "name": draw(tool_ids), "input": draw(tool_inputs)})
        messages.append({"role": "assistant", "content": blocks})
    if pending:
        messages.append({"role": "user", "content": [draw(tool_result_block(tool_id)) for tool_id in pending]})
    return messages


schemas = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "object"])}),
    lambda inner: st.fixed_dictionaries(
        {"type": st.just("object"), "properties": st.dictionaries(tool_ids, inner, max_size=3)},
        optional={
            "$schema": st.just("https://json-schema.org/draft/2020-12/schema"),
            "additionalProperties": st.booleans(),
        },
    ),
    max_leaves=6,
)


def keys_of(value: object) -> set[str]:
    """Every dict key at any depth."""
    if isinstance(value, dict):
        return set(value).union(*(keys_of(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(keys_of(v) for v in value))
    return set()


PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(conversation(), st.lists(st.tuples(tool_ids, schemas), max_size=3))
def test_request_translation_properties(messages, tools):
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
        "tools": [{"name": n, "input_schema": s} for n, s in tools],
    }
    out = anthropic_to_openai(body)
    # Keys, not text: a generated tool result may itself contain the string "$schema".
    assert not {"cache_control", "$schema"} & keys_of(out)
    encoded = orjson.dumps(out).decode()
    roles = [m["role"] for m in out["messages"]]
    assert set(roles) <= {"system", "user", "assistant", "tool"}

    # Every tool call is answered, in order, by tool messages right after its assistant message.
    for i, message in enumerate(out["messages"]):
        calls = [c["id"] for c in message.get("tool_calls") or ()]
        if calls:
            following = out["messages"][i + 1 : i + 1 + len(calls)]
            assert [m.get("tool_call_id") for m in following] == calls

    # Tool inputs survive as JSON arguments; text survives somewhere in the output.
    source_calls = [b for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    out_calls = [c for m in out["messages"] for c in m.get("tool_calls") or ()]
    assert [orjson.loads(c["function"]["arguments"]) for c in out_calls] == [b["input"] for b in source_calls]
    for message in messages:
        blocks = message["content"] if isinstance(message["content"], list) else []
        for block in blocks:
            if block["type"] == "text" and block["text"]:
                assert orjson.dumps(block["text"]).decode()[1:-1] in encoded
    for (_, schema), tool in zip(tools, out.get("tools", []), strict=True):
        assert tool["function"]["parameters"] == clean_schema(schema)


@st.composite
def completion(draw):
    content = draw(st.one_of(st.none(), text))
    reasoning = draw(st.one_of(st.none(), st.text(min_size=1, max_size=20)))
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": draw(tool_ids), "arguments": orjson.dumps(draw(tool_inputs)).decode()},
        }
        for i in range(draw(st.integers(0, 3)))
    ]
    finish = draw(st.sampled_from(["stop", "length", "tool_calls", None]))
    return content, reasoning, calls, finish


def _chunks(content, reasoning, calls, finish, cuts):
    """The stream a server might send for this completion, split at arbitrary points."""
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]

    def pieces(value):
        size = max(1, cuts)
        return [value[i : i + size] for i in range(0, len(value), size)]

    for piece in pieces(reasoning or ""):
        chunks.append({"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]})
    for piece in pieces(content or ""):
        chunks.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    for n, call in enumerate(calls):
        head = {
            "index": n,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"]},
        }
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        for piece in pieces(call["function"]["arguments"]):
            fragment = {"index": n, "function": {"arguments": piece}}
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]})
    if finish:
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    return chunks


def _replay(events):
    """Rebuild the message from SSE events the way a strict client does, checking block discipline."""
    blocks: list[dict] = []
    open_index = None
    stop_reason = None
    for name, data in events:
        if name == "content_block_start":
            assert open_index is None, "a block opened before the previous one was closed"
            assert data["index"] == len(blocks)
            open_index = data["index"]
            blocks.append({**data["content_block"], "_json": ""})
        elif name == "content_block_delta":
            assert data["index"] == open_index
            delta = data["delta"]
            block = blocks[open_index]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                block["_json"] += delta["partial_json"]
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
        elif name == "message_delta":
            stop_reason = data["delta"]["stop_reason"]
    assert open_index is None
    assert [name for name, _ in events][-1] == "message_stop"
    for block in blocks:
        raw = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = orjson.loads(raw)
    return blocks, stop_reason


@PROPERTY_SETTINGS
@given(completion(), st.integers(1, 8))
def test_streamed_and_unary_translations_agree(case, cuts):
    content, reasoning, calls, finish = case
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": calls}
    unary = openai_to_anthropic(
        {"choices": [{"message": message, "finish_reason": finish}]}, model="c", stop_sequences=[]
    )
    translator = StreamTranslator(model="c", stop_sequences=[])
    events = translator.start()
    for chunk in _chunks(content, reasoning, calls, finish, cuts):
        events += translator.feed(chunk)
    events += translator.finish()
    blocks, stop_reason = _replay(events)
    assert stop_reason == unary["stop_reason"]
    assert [{k: v for k, v in b.items() if k != "id"} for b in blocks] == [
        {k: v for k, v in b.items() if k != "id"} for b in unary["content"]
    ]
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == [c["id"] for c in calls]

    # A server that answers a stream request with one JSON completion is relayed as one chunk: same result.
    whole = StreamTranslator(model="c", stop_sequences=[])
    events = whole.start() + whole.feed(
        completion_as_chunk({"choices": [{"message": message, "finish_reason": finish}]})
    )
    assert _replay(events + whole.finish()) == (blocks, stop_reason)


KEYS = [
    "model",
    "messages",
    "role",
    "content",
    "type",
    "text",
    "system",
    "tools",
    "tool_choice",
    "name",
    "input",
    "input_schema",
    "id",
    "tool_use_id",
    "is_error",
    "source",
    "data",
    "media_type",
    "url",
    "max_tokens",
    "stream",
    "thinking",
    "output_config",
    "stop_sequences",
    "temperature",
    "top_k",
    "tool_name",
    "effort",
]
VALUES = [
    "user",
    "assistant",
    "system",
    "text",
    "image",
    "tool_use",
    "tool_result",
    "document",
    "base64",
    "url",
    "tool",
    "auto",
    "any",
    "thinking",
    "tool_reference",
    "content",
    "disabled",
]
fuzz_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.sampled_from(VALUES)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)),
    max_leaves=30,
)


@PROPERTY_SETTINGS
@given(fuzz_json)
def test_any_json_is_translated_or_refused_with_invalid_request(body):
    """Whatever a client sends, the answer is a translation or a 400 naming the field, never a crash."""
    try:
        out = anthropic_to_openai(body)
    except InvalidRequest as error:
        assert error.status == 400 and ":" in error.message
    else:
        assert isinstance(out["messages"], list)
        orjson.dumps(out)
