"""The gateway end to end: official SDK clients -> gateway -> scripted vLLM-like upstream."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import orjson
import pytest

from agentbake.scripted import Fault, Reply
from agentbake.scripted.tokens import render_prompt

TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command",
        "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    }
]
USER = [{"role": "user", "content": "hi"}]


def claude(gw, *, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="client-secret", max_retries=retries)


def oai(gw, *, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="client-secret", max_retries=retries)


# ------------------------------------------------------------------ OpenAI dialect


def test_openai_unary_strips_capture_fields_and_records_ids(gateway, upstream):
    upstream.fake.script = [Reply(text="two words")]
    raw = oai(gateway).chat.completions.with_raw_response.create(model="m", messages=USER, max_tokens=99999)
    body = orjson.loads(raw.content)
    assert body["choices"][0]["message"]["content"] == "two words"
    assert "logprobs" not in body["choices"][0] and "token_ids" not in body["choices"][0]
    assert "prompt_token_ids" not in body

    sent = upstream.fake.requests[0]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 1
    assert sent["return_tokens_as_token_ids"] is True and sent["return_token_ids"] is True
    assert sent["max_tokens"] == 8192

    (record,) = gateway.records()
    assert record.dialect == "openai" and record.turn == 0 and record.rollout_id is None
    assert record.completion_token_ids == upstream.fake.emitted[0] and record.completion_tokens == 3  # with EOS
    # The values the upstream sent, not the record's own entries re-read: distinct per token, so an
    # off-by-one or a value lost in the copy shows.
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]
    assert len(set(record.per_token_logps)) == 3 and all(-10 < v < 0 for v in record.per_token_logps)
    assert record.prompt_token_ids == render_prompt(sent)
    assert record.finish_reason == "stop" and record.upstream_status == 200 and record.ok
    assert "logprobs" not in record.response["choices"][0]
    assert record.latency_s > 0 and record.timestamp > 0


def test_openai_stream_strips_capture_fields(gateway, upstream):
    upstream.fake.script = [Reply(text="a b c", tool_calls=[("Bash", {"command": "ls"})])]
    stream = oai(gateway).chat.completions.create(model="m", messages=USER, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    args = "".join(
        tc.function.arguments or "" for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()
    )
    assert text == "a b c" and orjson.loads(args) == {"command": "ls"}
    assert all(c.choices[0].logprobs is None for c in chunks if c.choices)
    assert all(c.usage is None for c in chunks)  # the injected usage chunk is not passed on

    (record,) = gateway.records()
    assert record.completion_token_ids == upstream.fake.emitted[0]
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]  # every chunk's values, in order
    assert len(record.per_token_logps) > 10 and len(set(record.per_token_logps)) > 1
    assert record.finish_reason == "tool_calls"
    assert record.response["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"command": "ls"}'


def test_openai_client_asking_for_logprobs_keeps_text_tokens(gateway, upstream):
    """Its logprobs are not stripped and not turned into "token_id:<n>"; ids still come via token_ids."""
    completion = oai(gateway).chat.completions.create(model="m", messages=USER, logprobs=True, top_logprobs=2)
    tokens = [e.token for e in completion.choices[0].logprobs.content]
    assert tokens[0] == "Hello " and not any(t.startswith("token_id:") for t in tokens)
    assert "return_tokens_as_token_ids" not in upstream.fake.requests[0]
    assert [e.logprob for e in completion.choices[0].logprobs.content] == upstream.fake.emitted_logprobs[0]
    assert gateway.records()[0].completion_token_ids == upstream.fake.emitted[0]
    assert gateway.records()[0].per_token_logps == upstream.fake.emitted_logprobs[0]


def test_openai_stream_with_client_usage_keeps_usage(gateway, upstream):
    stream = oai(gateway).chat.completions.create(
        model="m", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    usages = [c.usage for c in stream if c.usage]
    assert usages and usages[-1].completion_tokens == len(upstream.fake.emitted[0])


def test_token_id_key_form_is_captured(gateway, upstream):
    upstream.fake.script = [Reply(id_form="key")]
    oai(gateway).chat.completions.create(model="m", messages=USER)
    record = gateway.records()[0]
    assert record.logprobs[0]["token_id"] == upstream.fake.emitted[0][0]
    assert record.completion_token_ids == upstream.fake.emitted[0]
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]


def test_openai_errors_pass_through_status_body_and_retry_after(gateway, upstream):
    upstream.fake.script = [Fault(status=429, message="slow down", headers={"retry-after": "7"})]
    response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m", "messages": USER})
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert response.json()["error"]["message"] == "slow down"
    record = gateway.records()[0]
    assert record.upstream_status == 429 and record.upstream_error == "slow down" and not record.ok


def test_openai_sdk_retries_a_500_and_the_retry_is_marked(gateway, upstream):
    upstream.fake.script = [Fault(status=500), Reply(text="recovered")]
    completion = oai(gateway, retries=2).chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == "recovered"
    first, second = gateway.records()
    assert first.upstream_status == 500 and first.retry_of is None
    assert second.ok and second.retry_of == 0


def test_openai_stream_cut_mid_way_raises_in_the_client(gateway, upstream):
    upstream.fake.script = [Reply(text="one two three four", reset_after=2)]
    with pytest.raises(openai.APIError, match="cut mid-way"):
        list(oai(gateway).chat.completions.create(model="m", messages=USER, stream=True))
    record = gateway.records()[0]
    assert "cut mid-way" in record.upstream_error
    assert record.completion_token_ids == upstream.fake.emitted[0][:2]  # what arrived is kept


def test_models_and_healthz(gateway, upstream):
    assert [m.id for m in oai(gateway).models.list()] == ["scripted"]
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}


# ------------------------------------------------------------------ Anthropic dialect


def test_anthropic_unary_text_and_usage(gateway, upstream):
    upstream.fake.script = [Reply(text="hello there", reasoning="let me think")]
    message = claude(gateway).messages.create(model="claude-x", max_tokens=20000, messages=USER)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "let me think" and message.content[1].text == "hello there"
    assert message.stop_reason == "end_turn" and message.model == "claude-x"
    assert message.usage.input_tokens == len(render_prompt(upstream.fake.requests[0]))
    assert message.usage.output_tokens == len(upstream.fake.emitted[0])
    assert message.usage.cache_read_input_tokens == 0
    assert upstream.fake.requests[0]["max_tokens"] == 8192
    (record,) = gateway.records()
    assert record.dialect == "anthropic" and record.completion_token_ids == upstream.fake.emitted[0]
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]  # `<think>` and reasoning tokens too


def test_anthropic_unary_tool_use_and_tool_result_round_trip(gateway, upstream):
    upstream.fake.script = [
        Reply(text="", tool_calls=[("Bash", {"command": "ls -la"})], tool_call_ids=["call_0"]),
        Reply(text="done"),
    ]
    client = claude(gateway)
    first = client.messages.create(model="c", max_tokens=100, messages=USER, tools=TOOLS)
    assert first.stop_reason == "tool_use"
    (use,) = first.content
    assert use.type == "tool_use" and use.name == "Bash" and use.input == {"command": "ls -la"}
    assert use.id == "call_0"
    follow_up = [
        *USER,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": "Exit code 3\nboom",
                    "is_error": True,
                },
                {"type": "text", "text": "please fix it", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    assert client.messages.create(model="c", max_tokens=100, messages=follow_up, tools=TOOLS).content[0].text == "done"
    sent = upstream.fake.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": '{"command":"ls -la"}'}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_0", "content": "Error: Exit code 3\nboom"}
    assert sent[3] == {"role": "user", "content": "please fix it"}
    tools = upstream.fake.requests[0]["tools"]
    assert "$schema" not in tools[0]["function"]["parameters"]
    assert tools[0]["function"]["parameters"]["additionalProperties"] is False


def test_anthropic_stream_text_and_several_tool_calls(gateway, upstream):
    calls = [("Bash", {"command": "ls"}), ("Bash", {"command": "pwd", "timeout": 5})]
    upstream.fake.script = [Reply(text="Two commands.", reasoning="plan", tool_calls=calls)]
    with claude(gateway).messages.stream(model="c", max_tokens=100, messages=USER, tools=TOOLS) as stream:
        events = list(stream)
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[1].text == "Two commands."
    assert [b.input for b in message.content[2:]] == [{"command": "ls"}, {"command": "pwd", "timeout": 5}]
    assert message.content[2].id != message.content[3].id
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == len(upstream.fake.emitted[0])
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds.count("content_block_start") == 4
    assert kinds.count("content_block_stop") == 4 and kinds[-1] == "message_stop"
    assert any(e.type == "content_block_delta" and e.delta.type == "input_json_delta" for e in events)
    (record,) = gateway.records()
    assert record.completion_token_ids == upstream.fake.emitted[0] and record.finish_reason == "tool_calls"
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]


def test_anthropic_stream_sends_message_start_before_the_first_token(gateway, upstream):
    """Real streaming: message_start arrives while the upstream is still generating."""
    upstream.fake.script = [Reply(text="slow " * 5, chunk_delay_s=0.2)]
    body = {"model": "c", "max_tokens": 10, "messages": USER, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/messages?beta=true", json=body) as response:
        assert response.headers["content-type"] == "text/event-stream"
        lines = response.iter_lines()
        assert next(lines) == "event: message_start"
        assert len(upstream.fake.emitted) == 1 and not gateway.records()  # the call is still running
        rest = list(lines)
    assert "event: message_stop" in rest


def test_anthropic_stream_without_finish_reason_still_closes_blocks(gateway, upstream):
    upstream.fake.script = [Reply(text="partial", tool_calls=[("Bash", {"command": "ls"})], omit_finish=True)]
    with claude(gateway).messages.stream(model="c", max_tokens=100, messages=USER, tools=TOOLS) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use" and message.content[1].input == {"command": "ls"}
    record = gateway.records()[0]
    assert record.finish_reason is None and record.upstream_error is None
    assert record.completion_token_ids == upstream.fake.emitted[0]


def test_a_stream_request_answered_with_plain_json_is_still_streamed(gateway, upstream):
    upstream.fake.script = [
        Reply(text="whole answer", tool_calls=[("Bash", {"command": "ls"})], ignore_stream=True),
        Reply(text="plain", ignore_stream=True),
    ]
    with claude(gateway).messages.stream(model="c", max_tokens=100, messages=USER, tools=TOOLS) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["text", "tool_use"] and message.content[1].input == {"command": "ls"}
    assert message.stop_reason == "tool_use"
    chunks = list(oai(gateway).chat.completions.create(model="m", messages=USER, stream=True))
    assert chunks[0].choices[0].delta.content == "plain" and chunks[0].choices[0].logprobs is None
    first, second = gateway.records()
    assert (
        first.completion_token_ids == upstream.fake.emitted[0]
        and second.completion_token_ids == upstream.fake.emitted[1]
    )
    assert first.ok and first.finish_reason == "tool_calls"


def test_anthropic_stream_skips_garbage_sse_lines(gateway, upstream):
    upstream.fake.script = [Reply(text="one two three")]
    upstream.fake.script[0].garbage = True
    with claude(gateway).messages.stream(model="c", max_tokens=100, messages=USER) as stream:
        assert stream.get_final_text() == "one two three"
    record = gateway.records()[0]
    assert "malformed" in record.upstream_error and record.completion_token_ids == upstream.fake.emitted[0]


@pytest.mark.parametrize(
    ("reply", "error", "tokens_kept"),
    [
        (Reply(text="one two three four", reset_after=3), "upstream stream cut mid-way", 3),
        (Reply(text="one two three", error_after=1), "upstream error in stream: scripted engine failure", 1),
    ],
    ids=["connection reset", "vLLM error payload"],
)
def test_a_stream_broken_after_it_started_ends_with_an_error_event(gateway, upstream, reply, error, tokens_kept):
    upstream.fake.script = [reply]
    with (
        pytest.raises(anthropic.APIStatusError, match=error),
        claude(gateway).messages.stream(model="c", max_tokens=100, messages=USER) as stream,
    ):
        stream.get_final_message()
    record = gateway.records()[0]
    assert record.upstream_error.startswith(error)
    assert record.completion_token_ids == upstream.fake.emitted[0][:tokens_kept]  # what arrived is kept


def test_anthropic_stop_sequence_and_max_tokens(gateway, upstream):
    upstream.fake.script = [Reply(text="x", matched_stop="END"), Reply(text="y", finish_reason="length")]
    client = claude(gateway)
    first = client.messages.create(model="c", max_tokens=5, messages=USER, stop_sequences=["END"])
    assert (first.stop_reason, first.stop_sequence) == ("stop_sequence", "END")
    assert upstream.fake.requests[0]["stop"] == ["END"]
    assert client.messages.create(model="c", max_tokens=5, messages=USER).stop_reason == "max_tokens"


@pytest.mark.parametrize(
    ("status", "expected_status", "error_class", "error_type"),
    [
        (400, 400, anthropic.BadRequestError, "invalid_request_error"),
        (404, 404, anthropic.NotFoundError, "not_found_error"),
        (500, 500, anthropic.InternalServerError, "api_error"),
        (503, 529, anthropic.APIStatusError, "overloaded_error"),
        (529, 529, anthropic.APIStatusError, "overloaded_error"),
    ],
)
def test_anthropic_upstream_errors_map_to_actionable_statuses(
    gateway, upstream, status, expected_status, error_class, error_type
):
    upstream.fake.script = [Fault(status=status, message="context too long" if status == 400 else "busy")]
    with pytest.raises(error_class) as caught:
        claude(gateway).messages.create(model="c", max_tokens=5, messages=USER)
    assert caught.value.status_code == expected_status
    assert caught.value.body["error"]["type"] == error_type
    if status == 400:
        assert "context too long" in caught.value.body["error"]["message"]
    record = gateway.records()[0]
    assert record.upstream_status == status and record.response is None and not record.ok


def test_anthropic_streaming_request_gets_a_real_status_on_upstream_error(gateway, upstream):
    """The upstream fails before streaming: the client gets the status, not an empty SSE stream."""
    upstream.fake.script = [Fault(status=429, headers={"retry-after": "3"})]
    body = {"model": "c", "max_tokens": 10, "messages": USER, "stream": True}
    response = httpx.post(gateway.url + "/v1/messages?beta=true", json=body)
    assert response.status_code == 429 and response.headers["retry-after"] == "3"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_anthropic_sdk_honours_retry_after_and_the_retry_is_marked(gateway, upstream):
    upstream.fake.script = [Fault(status=429, headers={"retry-after": "0.1"}), Reply(text="ok now")]
    message = claude(gateway, retries=1).messages.create(model="c", max_tokens=5, messages=USER)
    assert message.content[0].text == "ok now"
    first, second = gateway.records()
    assert first.upstream_status == 429 and second.retry_of == first.turn


def test_stream_fallback_to_unary_is_marked_as_a_retry(gateway, upstream):
    """Claude Code re-sends a cut stream with stream=false: same content, so retry_of is set."""
    upstream.fake.script = [Reply(text="a b c d", reset_after=1), Reply(text="a b c d")]
    client = claude(gateway)
    with (
        pytest.raises(anthropic.APIStatusError),
        client.messages.stream(model="c", max_tokens=9, messages=USER) as s,
    ):
        s.get_final_message()
    client.messages.create(model="c", max_tokens=9, messages=USER)
    client.messages.create(model="c", max_tokens=9, messages=[{"role": "user", "content": "other"}])
    assert [r.retry_of for r in gateway.records()] == [None, 0, None]


@pytest.mark.parametrize(
    ("body", "message", "dialects"),
    [
        ([1, 2], "not a JSON object", 2),
        ({"choices": True}, "unexpected shape", 2),
        ({"choices": []}, "unexpected shape", 2),
        # Only translation needs a message object; the OpenAI dialect passes such an answer through.
        ({"choices": [{"message": "text instead of an object"}]}, "unexpected shape", 1),
    ],
)
def test_a_200_that_breaks_the_schema_is_a_recorded_502(gateway, upstream, body, message, dialects):
    clients = (
        lambda: claude(gateway).messages.create(model="c", max_tokens=5, messages=USER),
        lambda: oai(gateway).chat.completions.create(model="m", messages=USER),
    )
    for client_call in clients[:dialects]:
        upstream.fake.script = [Fault(status=200, body=body)]
        with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as caught:
            client_call()
        assert caught.value.status_code == 502 and message in caught.value.message
    records = gateway.records()
    assert len(records) == dialects and all(message in r.upstream_error and r.upstream_status == 200 for r in records)


def test_upstream_timeout_is_a_504(make_gateway, upstream):
    gw = make_gateway(read_timeout_s=0.2)
    upstream.fake.script = [Fault(status=200, delay_s=1.0)]
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude(gw).messages.create(model="c", max_tokens=5, messages=USER)
    assert caught.value.status_code == 504 and "timed out" in caught.value.message
    record = gw.records()[0]
    assert record.upstream_status is None and "timed out" in record.upstream_error


def test_upstream_refusing_connections_is_a_529(make_gateway, tmp_path):
    gw = make_gateway(upstream="http://127.0.0.1:9/v1")  # the discard port: nothing listens
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude(gw).messages.create(model="c", max_tokens=5, messages=USER)
    assert caught.value.status_code == 529 and caught.value.body["error"]["type"] == "overloaded_error"
    response = httpx.post(gw.url + "/v1/chat/completions", json={"model": "m", "messages": USER})
    assert response.status_code == 529 and "unavailable" in response.json()["error"]["message"]
    assert len(gw.records()) == 2


# ------------------------------------------------------------------ rewriting and capture settings


def test_claude_code_style_request_is_rewritten(make_gateway, upstream):
    gw = make_gateway(model_override="Qwen/Qwen3-8B", disable_thinking=True)
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": False,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=sdk-cli"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "system", "content": "reminder", "output_config": {"effort": "low"}},
        ],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "u"},
        "context_management": {"edits": []},
        "output_config": {"effort": "high"},
    }
    assert httpx.post(gw.url + "/v1/messages?beta=true", json=body).status_code == 200
    sent = upstream.fake.requests[0]
    assert sent["model"] == "Qwen/Qwen3-8B" and sent["max_tokens"] == 8192
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["messages"][0] == {"role": "system", "content": "You are Claude Code."}
    assert sent["messages"][2] == {"role": "system", "content": "reminder"}
    assert sent["reasoning_effort"] == "high"
    assert not {"metadata", "context_management", "thinking", "output_config"} & sent.keys()
    assert "cache_control" not in orjson.dumps(sent).decode()


def test_inner_system_messages_can_go_as_user_messages(make_gateway, upstream):
    gw = make_gateway(inner_system_as_user=True)
    messages = [*USER, {"role": "assistant", "content": "ok"}, {"role": "system", "content": "reminder"}]
    claude(gw).messages.create(model="c", max_tokens=5, system="first", messages=messages)
    sent = upstream.fake.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[0]["content"] == "first" and sent[3]["content"] == "reminder"


def test_max_tokens_renamed_for_models_that_reject_it(make_gateway, upstream):
    gw = make_gateway(model_override="o3-mini", max_tokens_cap=None)
    claude(gw).messages.create(model="c", max_tokens=20000, messages=USER)
    sent = upstream.fake.requests[0]
    assert "max_tokens" not in sent and sent["max_completion_tokens"] == 20000


def test_capture_can_be_disabled(make_gateway, upstream):
    gw = make_gateway(capture_logprobs=False, request_token_ids=False)
    oai(gw).chat.completions.create(model="m", messages=USER)
    sent = upstream.fake.requests[0]
    assert not {"logprobs", "top_logprobs", "return_tokens_as_token_ids", "return_token_ids"} & sent.keys()
    assert gw.records()[0].completion_token_ids == []


def test_vllm_only_fields_are_dropped_once_the_upstream_rejects_them(gateway, upstream):
    upstream.fake.reject_fields = {"return_token_ids"}
    client = claude(gateway)
    assert client.messages.create(model="c", max_tokens=5, messages=USER).content[0].text
    assert ["return_token_ids" in r for r in upstream.fake.requests] == [True, False]
    client.messages.create(model="c", max_tokens=5, messages=USER)
    assert len(upstream.fake.requests) == 3 and "return_token_ids" not in upstream.fake.requests[2]
    first, second = gateway.records()
    assert first.ok and first.completion_token_ids == upstream.fake.emitted[0]  # still via "token_id:<n>"
    assert "return_token_ids" not in first.request and first.prompt_token_ids is None
    assert second.retry_of == first.turn


def test_a_real_400_is_not_mistaken_for_a_rejected_field(gateway, upstream):
    upstream.fake.script = [Fault(status=400, message="prompt is too long")]
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        claude(gateway).messages.create(model="c", max_tokens=5, messages=USER)
    assert len(upstream.fake.requests) == 1 and "return_token_ids" in upstream.fake.requests[0]


def test_rollout_prefix_tags_records_and_numbers_turns_per_rollout(gateway, upstream):
    for rollout in ("a", "b", "a"):
        client = anthropic.Anthropic(base_url=f"{gateway.url}/r/{rollout}", api_key="k", max_retries=0)
        client.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": rollout}])
    oai_client = openai.OpenAI(base_url=f"{gateway.url}/r/a/v1", api_key="k", max_retries=0)
    oai_client.chat.completions.create(model="m", messages=USER)
    assert [(r.rollout_id, r.turn, r.dialect) for r in gateway.records()] == [
        ("a", 0, "anthropic"),
        ("b", 0, "anthropic"),
        ("a", 1, "anthropic"),
        ("a", 2, "openai"),
    ]


def test_upstream_key_comes_from_env_and_never_reaches_records(make_gateway, upstream, monkeypatch):
    monkeypatch.setenv("AGENTBAKE_UPSTREAM_API_KEY", "sk-upstream-very-secret")
    gw = make_gateway()
    claude(gw).messages.create(model="c", max_tokens=5, messages=USER)
    headers = upstream.fake.headers[-1]
    assert headers["authorization"] == "Bearer sk-upstream-very-secret"
    assert "x-api-key" not in headers and "client-secret" not in orjson.dumps(headers).decode()
    assert "sk-upstream-very-secret" not in gw.trace.read_text()


def test_upstream_key_from_file(make_gateway, upstream, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    gw = make_gateway(api_key_file=key_file)
    oai(gw).chat.completions.create(model="m", messages=USER)
    assert upstream.fake.headers[-1]["authorization"] == "Bearer sk-from-file"


# ------------------------------------------------------------------ count_tokens


def test_count_tokens_exact_with_tokenize_and_estimated_without(gateway, upstream):
    client = claude(gateway)
    two = [*USER, {"role": "assistant", "content": "hello"}]
    counted = client.messages.count_tokens(model="c", messages=two).input_tokens
    (asked,) = upstream.fake.tokenized
    assert counted == len(render_prompt(asked))
    assert asked == {
        "model": "c",
        "messages": [*USER, {"role": "assistant", "content": "hello"}],
        "add_generation_prompt": True,
    }
    upstream.fake.tokenize_supported = False
    estimate = client.messages.count_tokens(model="c", messages=[{"role": "user", "content": "x" * 400}])
    assert 100 <= estimate.input_tokens <= 120
    client.messages.count_tokens(model="c", messages=USER)
    assert upstream.fake.paths.count("/tokenize") == 2  # after a 404 the gateway stops asking
    assert not gateway.records()  # counting is not a model call


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("path", "payload", "status", "message"),
    [
        ("/v1/messages", b"{not json", 400, "invalid JSON body"),
        ("/v1/messages", b"", 400, "empty request body"),
        ("/v1/messages", b"[1, 2]", 400, "body: expected a JSON object"),
        ("/v1/messages", b'{"model": "c", "messages": "hi"}', 400, "messages: expected an array of messages"),
        ("/v1/messages", b'{"model": 3, "messages": []}', 400, "model: expected a string, got number"),
        (
            "/v1/messages",
            b'{"model": "c", "max_tokens": "9", "messages": []}',
            400,
            "max_tokens: expected an integer, got string",
        ),
        (
            "/v1/messages",
            b'{"model": "c", "messages": [{"role": "user", "content": [{"type": "bogus"}]}]}',
            400,
            "messages[0].content[0].type: unknown content block type 'bogus'",
        ),
        (
            "/v1/messages",
            b'{"model": "c", "messages": [{"role": "robot", "content": "x"}]}',
            400,
            "messages[0].role: expected 'user', 'assistant' or 'system'",
        ),
        (
            "/v1/messages",
            b'{"model": "c", "messages": [{"role": "user", "content": 5}]}',
            400,
            "messages[0].content: expected a string or an array of content blocks, got number",
        ),
        (
            "/v1/messages",
            b'{"model": "c", "messages": [], "stream": "yes"}',
            400,
            "stream: expected a boolean",
        ),
        ("/v1/chat/completions", b"{oops", 400, "invalid JSON body"),
        ("/v1/chat/completions", b'{"model": "m"}', 400, "messages: expected an array of messages"),
        (
            "/v1/chat/completions",
            b'{"model": "m", "messages": [], "max_tokens": 1.5}',
            400,
            "max_tokens: expected an integer",
        ),
        ("/r/bad id!/v1/messages", b"{}", 400, "invalid rollout id"),
        ("/v1/nothing", b"{}", 404, "no endpoint POST /v1/nothing"),
    ],
)
def test_bad_input_gets_a_4xx_naming_the_problem(gateway, upstream, path, payload, status, message):
    response = httpx.post(gateway.url + path, content=payload, headers={"content-type": "application/json"})
    assert response.status_code == status
    body = response.json()
    text = body["error"]["message"]
    assert message in text
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] in (
            "invalid_request_error",
            "not_found_error",
        )
    assert upstream.fake.requests == [] and gateway.records() == []
    assert httpx.get(gateway.url + "/healthz").status_code == 200


def test_too_large_body_is_a_413_and_the_gateway_keeps_serving(make_gateway, upstream):
    gw = make_gateway(max_body_bytes=4096)
    big = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * 10000}]}
    with pytest.raises(anthropic.APIStatusError) as caught:
        claude(gw).messages.create(**big)
    assert caught.value.status_code == 413 and caught.value.body["error"]["type"] == "request_too_large"
    assert "exceeds the limit of 4096 bytes" in caught.value.message

    def chunked():  # no content-length: the limit is enforced while reading
        yield b'{"model": "c", "messages": [{"role": "user", "content": "'
        yield b"y" * 8000
        yield b'"}]}'

    response = httpx.post(gw.url + "/v1/chat/completions", content=chunked())
    assert response.status_code == 413 and "exceeds the limit" in response.json()["error"]["message"]
    assert claude(gw).messages.create(model="c", max_tokens=5, messages=USER).content[0].text


# ------------------------------------------------------------------ concurrency and disconnects


def test_parallel_streams_keep_their_own_tokens(gateway, upstream):
    """Claude Code's subagents put up to 8 calls in flight: each record holds exactly its call's ids."""
    upstream.fake.responder = lambda request: Reply(text=request["messages"][-1]["content"] * 3, chunk_delay_s=0.01)
    prompts = [f"p{i} " for i in range(8)]

    def one(prompt: str) -> str:
        with claude(gateway).messages.stream(
            model="c", max_tokens=50, messages=[{"role": "user", "content": prompt}]
        ) as stream:
            return stream.get_final_text()

    with ThreadPoolExecutor(max_workers=8) as pool:
        texts = list(pool.map(one, prompts))
    assert texts == [p * 3 for p in prompts]
    records = gateway.records()
    assert sorted(r.turn for r in records) == list(range(8))
    emitted = {tuple(ids) for ids in upstream.fake.emitted}
    assert {tuple(r.completion_token_ids) for r in records} == emitted and len(emitted) == 8


def test_a_client_leaving_mid_stream_still_gets_its_call_recorded(gateway, upstream):
    upstream.fake.script = [Reply(text="a b c d e f", chunk_delay_s=0.05)]
    body = {"model": "c", "max_tokens": 10, "messages": USER, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/messages", json=body) as response:
        assert next(response.iter_lines()) == "event: message_start"
    for _ in range(100):  # the gateway reads the upstream answer to its end, then records it
        if gateway.records():
            break
        time.sleep(0.05)
    (record,) = gateway.records()
    assert record.completion_token_ids == upstream.fake.emitted[0] and record.finish_reason == "stop"
    assert claude(gateway).messages.create(model="c", max_tokens=5, messages=USER).content
