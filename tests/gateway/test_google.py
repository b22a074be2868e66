"""The Gemini dialect end to end: the official `google-genai` SDK -> gateway -> scripted vLLM-like upstream, the
call translated to chat completions and captured like the other dialects."""

from __future__ import annotations

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors, types

from agentbake.gateway.google_request import google_to_openai
from agentbake.gateway.google_tools import json_schema, tool_choice
from agentbake.scripted import Fault, Reply
from agentbake.scripted.tokens import render_prompt

SHELL = types.FunctionDeclaration(
    name="shell",
    description="Run a command",
    parameters=types.Schema(
        type="OBJECT",
        properties={"command": types.Schema(type="STRING"), "timeout": types.Schema(type="INTEGER", nullable=True)},
        required=["command"],
    ),
)
TOOLS = [types.Tool(function_declarations=[SHELL])]
# What the gateway sends upstream for SHELL: JSON Schema, types lower-case, `nullable` as a null type.
SHELL_CHAT = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": ["integer", "null"]}},
            "required": ["command"],
        },
    },
}


def gemini(gw, *, path: str = "", key: str = "client-secret", version: str = "v1beta") -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=gw.url + path, api_version=version))


def post(gw, method: str, body: dict, *, model: str = "m", query: str = "", headers: dict | None = None):
    return httpx.post(f"{gw.url}/v1beta/models/{model}:{method}{query}", json=body, headers=headers, timeout=10)


def sse_chunks(gw, body: dict, model: str = "m") -> list[dict]:
    """Every `data:` payload of a streamed answer, read with a plain HTTP client; no other lines may come."""
    url = f"{gw.url}/v1beta/models/{model}:streamGenerateContent?alt=sse"
    with httpx.stream("POST", url, json=body, timeout=10) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    return [orjson.loads(line.removeprefix("data: ")) for line in lines]


HI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


# ------------------------------------------------------------------ answers and capture


def test_unary_text_and_the_record_holds_the_upstreams_tokens(gateway, upstream):
    upstream.fake.script = [Reply(text="two words")]
    config = types.GenerateContentConfig(
        system_instruction="Be brief.",
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        max_output_tokens=99999,
        stop_sequences=["END"],
        seed=7,
    )
    client = gemini(gateway)  # kept: a Client closes its connections when collected
    response = client.models.generate_content(model="gemini-x", contents="hi", config=config)
    assert response.text == "two words" and response.model_version == "gemini-x" and response.response_id
    (candidate,) = response.candidates
    assert candidate.finish_reason == types.FinishReason.STOP and candidate.content.role == "model"

    sent = upstream.fake.requests[0]
    assert sent["model"] == "gemini-x"  # from the path
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["stop"], sent["seed"]) == (0.5, 0.9, 20, ["END"], 7)
    assert sent["max_tokens"] == 8192  # the gateway's cap applies
    assert sent["logprobs"] is True and sent["return_token_ids"] is True and sent["return_tokens_as_token_ids"]
    usage = response.usage_metadata
    assert usage.prompt_token_count == len(render_prompt(sent))
    assert usage.candidates_token_count == len(upstream.fake.emitted[0])
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count

    (record,) = gateway.records()
    assert record.dialect == "google" and record.request == sent and record.ok
    assert record.completion_token_ids == upstream.fake.emitted[0]
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]
    assert record.capture == {"verdict": "complete", "reasons": []} and record.finish_reason == "stop"
    assert record.prompt_token_ids == render_prompt(sent)


def test_streaming_text_chunks_then_finish_and_usage(gateway, upstream):
    upstream.fake.script = [Reply(text="one two three four")]
    client = gemini(gateway)
    chunks = list(client.models.generate_content_stream(model="gemini-x", contents="hi"))
    assert "".join(c.text or "" for c in chunks) == "one two three four" and len(chunks) > 2
    assert [c.candidates[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata.candidates_token_count == len(upstream.fake.emitted[0])
    assert {c.response_id for c in chunks} == {last.response_id} and last.model_version == "gemini-x"
    assert upstream.fake.requests[0]["stream"] is True
    (record,) = gateway.records()
    assert record.dialect == "google" and record.completion_token_ids == upstream.fake.emitted[0]
    assert record.capture["verdict"] == "complete"


def test_every_sse_chunk_is_a_response_and_keep_alives_do_not_reach_the_client(gateway, upstream):
    """The google-genai SDK takes an SSE comment for a broken chunk: upstream keep-alives are not relayed."""
    upstream.fake.script = [Reply(text="a b c", keep_alive=True, tool_calls=[("shell", {"command": "ls"})])]
    chunks = sse_chunks(gateway, {**HI, "tools": [{"functionDeclarations": [SHELL.model_dump(exclude_none=True)]}]})
    for chunk in chunks:
        types.GenerateContentResponse.model_validate(chunk)  # the SDK's model forbids unknown fields
    parts = [part for chunk in chunks for part in chunk["candidates"][0].get("content", {}).get("parts", [])]
    assert [p.get("text") for p in parts[:-1]] == ["a ", "b ", "c"]
    assert parts[-1]["functionCall"]["args"] == {"command": "ls"}  # whole, in one chunk
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in chunks[-1]


def test_length_and_abort_are_max_tokens(gateway, upstream):
    upstream.fake.script = [Reply(text="a b", finish_reason="length"), Reply(text="a b", finish_reason="abort")]
    client = gemini(gateway)
    assert client.models.generate_content(model="m", contents="go").candidates[0].finish_reason == "MAX_TOKENS"
    chunks = list(client.models.generate_content_stream(model="m", contents="go"))
    assert chunks[-1].candidates[0].finish_reason == "MAX_TOKENS"


def test_thoughts_come_back_only_when_asked_for(gateway, upstream):
    upstream.fake.script = [Reply(reasoning="plan it", text="done") for _ in range(3)]
    client = gemini(gateway)
    thinking = types.ThinkingConfig(include_thoughts=True, thinking_level="HIGH")
    shown = client.models.generate_content(
        model="m", contents="go", config=types.GenerateContentConfig(thinking_config=thinking)
    )
    assert [(p.text, p.thought) for p in shown.candidates[0].content.parts] == [("plan it", True), ("done", None)]
    assert upstream.fake.requests[0]["reasoning_effort"] == "high"
    streamed = client.models.generate_content_stream(
        model="m", contents="go", config=types.GenerateContentConfig(thinking_config=thinking)
    )
    seen = [(p.text, p.thought) for c in streamed for p in (c.candidates[0].content or types.Content()).parts or []]
    assert seen == [("plan ", True), ("it", True), ("done", None)]
    hidden = client.models.generate_content(
        model="m", contents="go", config=types.GenerateContentConfig(thinking_config={"thinking_budget": 0})
    )
    assert [p.text for p in hidden.candidates[0].content.parts] == ["done"]
    assert upstream.fake.requests[2]["chat_template_kwargs"] == {"enable_thinking": False}


# ------------------------------------------------------------------ function calling, multi-turn


@pytest.mark.parametrize("ids", ["kept", "dropped"])
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_function_calls_round_trip_and_the_next_prompt_extends_the_last(gateway, upstream, stream, ids):
    """The client sends the model turn back and answers each call in a user turn: one assistant message with
    both calls, then one tool message per response under the same id (the upstream's when the client keeps
    the ids Gemini returns, made from the call's position when it drops them), and the next prompt extends
    the previous prompt and completion exactly."""
    calls = [("shell", {"command": "ls -la"}), ("shell", {"command": "cat é.txt"})]
    upstream.fake.script = [Reply(text="Looking.", tool_calls=calls), Reply(text="done")]
    client = gemini(gateway)
    config = types.GenerateContentConfig(system_instruction="sys", tools=TOOLS)
    question = types.Content(role="user", parts=[types.Part(text="look")])
    if stream:
        chunks = list(client.models.generate_content_stream(model="m", contents=[question], config=config))
        parts = [p for c in chunks for p in (c.candidates[0].content or types.Content()).parts or []]
        model_turn = types.Content(role="model", parts=parts)
    else:
        model_turn = client.models.generate_content(model="m", contents=[question], config=config).candidates[0].content
    texts = [p.text for p in model_turn.parts if p.text]
    called = [p.function_call for p in model_turn.parts if p.function_call]
    assert "".join(texts) == "Looking." and [(c.name, c.args) for c in called] == calls
    assert all(c.id.startswith("chatcmpl-tool-") for c in called)
    if ids == "dropped":
        for call in called:
            call.id = None
    answers = types.Content(
        role="user",
        parts=[
            types.Part(function_response=types.FunctionResponse(id=c.id, name=c.name, response={"output": out}))
            for c, out in zip(called, ["a.txt", "hello"], strict=True)
        ],
    )
    second = client.models.generate_content(model="m", contents=[question, model_turn, answers], config=config)
    assert second.text == "done"

    sent = upstream.fake.requests[1]["messages"]
    expected_ids = [c.id for c in called] if ids == "kept" else ["call_1_1", "call_1_2"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert sent[2]["tool_calls"] == [
        {"id": i, "type": "function", "function": {"name": "shell", "arguments": '{"command": "' + cmd + '"}'}}
        for i, cmd in zip(expected_ids, ["ls -la", "cat é.txt"], strict=True)
    ]
    assert sent[3:] == [
        {"role": "tool", "tool_call_id": expected_ids[0], "content": "a.txt"},
        {"role": "tool", "tool_call_id": expected_ids[1], "content": "hello"},
    ]
    assert upstream.fake.requests[1]["tools"] == [SHELL_CHAT]
    first_record, second_record = gateway.records()
    assert second_record.prefix == {"previous_turn": 0, "extends": True}
    head = first_record.prompt_token_ids + first_record.completion_token_ids
    assert second_record.prompt_token_ids[: len(head)] == head


def test_function_responses_are_matched_by_id_then_by_name():
    """An id the calls do not have (Gemini CLI makes one up for a call without) falls back to the name."""
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {
            "role": "model",
            "parts": [
                {"thought": True, "text": "hidden"},
                {"functionCall": {"name": "read", "args": {"p": "a"}}},
                {"functionCall": {"id": "w1", "name": "write", "args": {}}},
                {"functionCall": {"name": "read", "args": {"p": "b"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "w1", "name": "write", "response": {"error": "denied"}}},
                {"functionResponse": {"name": "read", "response": {"output": "A"}}},
                {"functionResponse": {"id": "read-17", "name": "read", "response": {"lines": 2, "text": "B"}}},
                {"text": "and now?"},
                {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
            ],
        },
    ]
    messages = google_to_openai({"contents": contents}, "m", stream=False).body["messages"]
    assert messages[1]["content"] is None and [c["id"] for c in messages[1]["tool_calls"]] == [
        "call_1_1",
        "w1",
        "call_1_3",
    ]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "w1", "content": "Error: denied"},
        {"role": "tool", "tool_call_id": "call_1_1", "content": "A"},
        {"role": "tool", "tool_call_id": "call_1_3", "content": '{"lines": 2, "text": "B"}'},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and now?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
    ]


# ------------------------------------------------------------------ countTokens, paths, settings


def test_count_tokens_exact_with_tokenize_and_estimated_without(gateway, upstream):
    client = gemini(gateway)
    counted = client.models.count_tokens(model="gemini-x", contents="hello there").total_tokens
    (asked,) = upstream.fake.tokenized
    assert asked == {
        "model": "gemini-x",
        "messages": [{"role": "user", "content": "hello there"}],
        "add_generation_prompt": True,
    }
    assert counted == len(render_prompt(asked))
    wrapped = post(gateway, "countTokens", {"generateContentRequest": {"model": "models/x", **HI}})
    assert wrapped.json() == {"totalTokens": len(render_prompt(upstream.fake.tokenized[1]))}
    upstream.fake.tokenize_supported = False
    estimate = client.models.count_tokens(model="gemini-x", contents="x" * 400).total_tokens
    assert 100 <= estimate <= 120
    assert not gateway.records()  # counting is not a model call


def test_the_model_comes_from_the_path_and_the_settings_apply(make_gateway, upstream):
    gw = make_gateway(model_override="served/model", temperature=0.7, max_tokens_cap=100, disable_thinking=True)
    config = types.GenerateContentConfig(temperature=0.1, max_output_tokens=5000)
    client = gemini(gw, version="v1")
    response = client.models.generate_content(model="gemini-2.5-pro", contents="hi", config=config)
    assert response.model_version == "gemini-2.5-pro"  # the client's model, as the other dialects answer
    sent = upstream.fake.requests[0]
    assert sent["model"] == "served/model" and sent["temperature"] == 0.7 and sent["max_tokens"] == 100
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    gw_plain = make_gateway()
    slashed = post(gw_plain, "generateContent", HI, model="Qwen/Qwen3-8B")
    assert slashed.status_code == 200 and slashed.json()["modelVersion"] == "Qwen/Qwen3-8B"
    assert upstream.fake.requests[1]["model"] == "Qwen/Qwen3-8B"


def test_the_rollout_path_and_the_key_apply_and_the_key_is_never_forwarded(make_gateway, upstream):
    token = "goog-" + "t" * 24
    gw = make_gateway(rollout_id="r-9", client_token=token)
    upstream.fake.script = [Reply(text="ok"), Reply(text="by query")]
    client, wrong, elsewhere = (
        gemini(gw, path=p, key=k) for p, k in [("/r/r-9", token), ("/r/r-9", "x"), ("/r/r-8", token)]
    )
    assert client.models.generate_content(model="m", contents="hi").text == "ok"
    by_query = httpx.post(f"{gw.url}/r/r-9/v1/models/m:generateContent?key={token}", json=HI, timeout=10)
    assert by_query.status_code == 200 and by_query.json()["candidates"][0]["content"]["parts"] == [
        {"text": "by query"}
    ]
    with pytest.raises(errors.ClientError) as denied:
        wrong.models.generate_content(model="m", contents="hi")
    assert denied.value.code == 401 and denied.value.status == "UNAUTHENTICATED"
    assert "gateway token" in denied.value.message
    with pytest.raises(errors.ClientError) as other:
        elsewhere.models.generate_content(model="m", contents="hi")
    assert other.value.code == 403 and other.value.status == "PERMISSION_DENIED"
    assert [(r.rollout_id, r.dialect) for r in gw.records()] == [("r-9", "google"), ("r-9", "google")]
    seen = orjson.dumps([upstream.fake.headers, upstream.fake.paths, upstream.fake.requests]).decode()
    assert token not in seen and "goog" not in seen.lower()
    assert token not in gw.trace.read_text()


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "contents", "expected an array"),
        ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "contents[0].role", "expected 'user'"),
        (
            {"contents": [{"parts": [{"functionResponse": {"name": "f", "response": {}}}]}]},
            "contents[0].parts[0].functionResponse",
            "answers no functionCall",
        ),
        (
            {"contents": [{"parts": [{"inlineData": {"mimeType": "application/pdf", "data": "AA"}}]}]},
            "contents[0].parts[0].inlineData.mimeType",
            "'application/pdf' cannot be sent",
        ),
        (
            {"contents": [{"parts": [{"fileData": {"fileUri": "gs://x"}}]}]},
            "contents[0].parts[0].fileData",
            "Google's file store",
        ),
        ({"contents": [{"parts": [{"videoMetadata": {}}]}]}, "contents[0].parts[0]", "expected one of text"),
        (
            {"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]},
            "contents[0].parts[0].functionCall.name",
            "expected a string",
        ),
        ({**HI, "tools": [{"googleSearch": {}}]}, "tools[0].googleSearch", "runs at Google"),
        (
            {
                **HI,
                "tools": [{"functionDeclarations": [{"name": "f"}]}],
                "toolConfig": {"functionCallingConfig": {"mode": "SOME"}},
            },
            "toolConfig.functionCallingConfig.mode",
            "unknown mode",
        ),
        ({**HI, "generationConfig": {"candidateCount": 2}}, "generationConfig.candidateCount", "only 1 candidate"),
        ({**HI, "generationConfig": {"maxOutputTokens": "9"}}, "generationConfig.maxOutputTokens", "an integer"),
        (
            {**HI, "generationConfig": {"responseMimeType": "text/x.enum"}},
            "generationConfig.responseMimeType",
            "unsupported",
        ),
        ({**HI, "cachedContent": "cachedContents/1"}, "cachedContent", "keeps no cached contents"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(gateway, upstream, body, field, message):
    answer = post(gateway, "generateContent", body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert set(error) == {"code", "message", "status"} and (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"].startswith(field + ":") and message in error["message"]
    assert upstream.fake.requests == [] and gateway.records() == []


def test_the_json_array_stream_is_refused_and_unknown_paths_are_404s_in_googles_shape(gateway, upstream):
    array = post(gateway, "streamGenerateContent", HI)
    assert array.status_code == 400 and array.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "add ?alt=sse" in array.json()["error"]["message"]
    missing = post(gateway, "embedContent", HI)
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
    assert upstream.fake.requests == []


@pytest.mark.parametrize(
    ("status", "expected", "name"),
    [
        (400, 400, "INVALID_ARGUMENT"),
        (429, 429, "RESOURCE_EXHAUSTED"),
        (500, 500, "INTERNAL"),
        (503, 503, "UNAVAILABLE"),
    ],
)
@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent?alt=sse"])
def test_upstream_errors_map_to_googles_statuses(gateway, upstream, status, expected, name, method):
    upstream.fake.script = [Fault(status=status, message="context too long", headers={"retry-after": "3"})]
    answer = post(gateway, method, HI)
    assert answer.status_code == expected and answer.headers["retry-after"] == "3"
    error = answer.json()["error"]
    assert (error["code"], error["status"]) == (expected, name) and "context too long" in error["message"]
    (record,) = gateway.records()
    assert record.upstream_status == status and record.response is None and record.dialect == "google"


def test_the_sdk_raises_googles_errors(gateway, upstream):
    upstream.fake.script = [Fault(status=503)]
    client = gemini(gateway)
    with pytest.raises(errors.ServerError) as raised:
        client.models.generate_content(model="m", contents="hi")
    assert raised.value.code == 503 and raised.value.status == "UNAVAILABLE"


@pytest.mark.parametrize(
    ("reply", "error", "kept"),
    [
        (Reply(text="one two three four", reset_after=2), "upstream stream cut mid-way", 2),
        (Reply(text="one two three", error_after=1), "upstream error in stream: scripted engine failure", 1),
    ],
    ids=["connection reset", "vLLM error payload"],
)
def test_a_stream_broken_after_it_started_ends_with_an_error_chunk(gateway, upstream, reply, error, kept):
    upstream.fake.script = [reply]
    client = gemini(gateway)
    stream = client.models.generate_content_stream(model="m", contents="hi")
    with pytest.raises(errors.ServerError) as raised:
        list(stream)
    assert raised.value.code == 500 and raised.value.status == "INTERNAL" and error in raised.value.message
    record = gateway.records()[0]
    assert record.upstream_error.startswith(error)
    assert record.completion_token_ids == upstream.fake.emitted[0][:kept]  # what arrived is kept


# ------------------------------------------------------------------ pure translation


def test_schemas_tools_and_tool_config_translate():
    schema = {
        "type": "OBJECT",
        "propertyOrdering": ["a", "b"],
        "properties": {
            "a": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["X", "Y"]}},
            "b": {"anyOf": [{"type": "NUMBER"}, {"type": "BOOLEAN", "nullable": True}], "description": "b"},
            "type": {"type": "STRING", "$schema": "x"},
        },
    }
    assert json_schema(schema) == {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "string", "enum": ["X", "Y"]}},
            "b": {"anyOf": [{"type": "number"}, {"type": ["boolean", "null"]}], "description": "b"},
            "type": {"type": "string"},
        },
    }
    calling = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["shell"]}}
    assert tool_choice(calling) == {"type": "function", "function": {"name": "shell"}}
    assert tool_choice({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "b"]}}) == "required"
    assert tool_choice({"functionCallingConfig": {"mode": "NONE"}}) == "none" and tool_choice({}) is None
    raw = {"type": "object", "properties": {"x": {"type": "string"}}, "$schema": "s"}
    body = {
        **HI,
        "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": raw}, {"name": "g"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"responseMimeType": "application/json", "responseSchema": {"type": "OBJECT"}},
        "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
    }
    before = orjson.dumps(body)
    out = google_to_openai(body, "m", stream=True).body
    assert orjson.dumps(body) == before  # the client's body is left as it was
    assert [t["function"]["parameters"] for t in out["tools"]] == [
        {"type": "object", "properties": {"x": {"type": "string"}}},
        {"type": "object", "properties": {}},
    ]
    assert out["tool_choice"] == "auto" and out["stream_options"] == {"include_usage": True}
    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": {"type": "object"}},
    }
    bare = google_to_openai({**HI, "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}, "m", stream=False).body
    assert set(bare) == {"model", "messages"}  # chat completions refuse a tool_choice without tools
