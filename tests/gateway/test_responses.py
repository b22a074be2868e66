"""The Responses dialect end to end: the official `openai` SDK (`client.responses`) -> gateway -> scripted
vLLM-like upstream, the call translated to chat completions and captured like the other dialects."""

from __future__ import annotations

from typing import get_args

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from agentbake.gateway.translate_responses_request import responses_to_openai
from agentbake.scripted import Fault, Reply
from agentbake.scripted.tokens import render_prompt

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command",
    "strict": False,
    "parameters": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
        "additionalProperties": False,
    },
}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch", "format": {"type": "text"}}
# The SDK's event model for each event type (its union is discriminated by `type`).
EVENTS = {get_args(m.model_fields["type"].annotation)[0]: m for m in get_args(get_args(ResponseStreamEvent)[0])}


def oai(gw, *, path: str = "", retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + path + "/v1", api_key="client-secret", max_retries=retries)


def raw_events(gw, body: dict) -> list[tuple[str, dict]]:
    """(SSE event name, data) of every event of a streamed answer, read with a plain HTTP client."""
    with httpx.stream("POST", gw.url + "/v1/responses", json={**body, "stream": True}, timeout=10) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
        lines = [line for line in response.iter_lines() if line and not line.startswith(":")]
    names = [line.removeprefix("event: ") for line in lines[0::2]]
    return list(zip(names, [orjson.loads(line.removeprefix("data: ")) for line in lines[1::2]], strict=True))


# ------------------------------------------------------------------ answers and capture


def test_unary_text_is_a_response_and_the_record_holds_the_upstreams_tokens(gateway, upstream):
    upstream.fake.script = [Reply(text="two words")]
    response = oai(gateway).responses.create(
        model="gpt-x", instructions="Be brief.", input="hi", max_output_tokens=99999, temperature=0.5
    )
    assert response.object == "response" and response.status == "completed" and response.model == "gpt-x"
    assert response.id.startswith("resp_") and response.output_text == "two words"
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert [part.type for part in message.content] == ["output_text"] and message.content[0].logprobs == []

    sent = upstream.fake.requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert sent["max_tokens"] == 8192 and sent["temperature"] == 0.5  # the gateway's cap applies
    assert sent["logprobs"] is True and sent["return_token_ids"] is True and sent["return_tokens_as_token_ids"]
    assert response.usage.input_tokens == len(render_prompt(sent))
    assert response.usage.output_tokens == len(upstream.fake.emitted[0])
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens

    (record,) = gateway.records()
    assert record.dialect == "responses" and record.request == sent and record.ok
    assert record.completion_token_ids == upstream.fake.emitted[0]
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]
    assert len(set(record.per_token_logps)) == 3 and record.capture == {"verdict": "complete", "reasons": []}
    assert record.prompt_token_ids == render_prompt(sent) and record.finish_reason == "stop"


def test_unary_function_call_and_reasoning_items(gateway, upstream):
    upstream.fake.script = [Reply(text="Listing.", reasoning="plan", tool_calls=[("shell", {"command": ["ls"]})])]
    response = oai(gateway).responses.create(model="m", input="list", tools=[SHELL], tool_choice="auto")
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    reasoning, message, call = response.output
    assert reasoning.content[0].type == "reasoning_text" and reasoning.content[0].text == "plan"
    assert message.content[0].text == "Listing."
    assert (call.name, orjson.loads(call.arguments), call.status) == ("shell", {"command": ["ls"]}, "completed")
    assert call.call_id.startswith("chatcmpl-tool-") and call.id.startswith("fc_")
    tools = upstream.fake.requests[0]["tools"]
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "Run a command",
                "strict": False,
                "parameters": {k: v for k, v in SHELL["parameters"].items() if k != "$schema"},
            },
        }
    ]
    assert upstream.fake.requests[0]["tool_choice"] == "auto"
    record = gateway.records()[0]
    assert record.completion_token_ids == upstream.fake.emitted[0] and record.finish_reason == "tool_calls"


STREAM_ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",  # reasoning
    "response.content_part.added",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.output_item.added",  # message
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.output_item.added",  # function_call
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.output_item.added",  # a second function_call
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]


def test_stream_events_come_in_openais_order(gateway, upstream):
    calls = [("shell", {"command": ["ls"]}), ("shell", {"command": ["pwd"]})]
    upstream.fake.script = [Reply(text="Two calls.", reasoning="plan", tool_calls=calls)]
    stream = oai(gateway).responses.create(model="m", input="go", tools=[SHELL], stream=True)
    events = list(stream)
    kinds = [event.type for event in events]
    # Text and arguments arrive in several deltas each; the order is otherwise exact.
    collapsed = [k for i, k in enumerate(kinds) if not (k.endswith(".delta") and kinds[i - 1] == k)]
    assert collapsed == STREAM_ORDER
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Two calls."
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == [0, 1, 2, 3]
    assert [item.id for item in added] == [item.id for item in done]
    assert [orjson.loads(item.arguments) for item in done[2:]] == [args for _, args in calls]
    assert done[2].call_id != done[3].call_id
    final = events[-1].response
    assert final.status == "completed" and [item.id for item in final.output] == [item.id for item in done]
    assert final.usage.output_tokens == len(upstream.fake.emitted[0])
    for event in events:  # every delta points at the item it belongs to
        if hasattr(event, "item_id"):
            assert event.item_id == done[event.output_index].id

    (record,) = gateway.records()
    assert record.dialect == "responses" and record.completion_token_ids == upstream.fake.emitted[0]
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]
    assert record.finish_reason == "tool_calls" and record.capture["verdict"] == "complete"


def test_stream_events_validate_against_the_sdks_models(gateway, upstream):
    """Each raw event, parsed strictly by the SDK's own pydantic union; the SSE name is the event's type."""
    upstream.fake.script = [
        Reply(text="Done.", reasoning="hm", tool_calls=[("shell", {"command": ["ls"]})]),
        Reply(text="", tool_calls=[("apply_patch", {"input": "*** Begin Patch\n*** End Patch"})]),
    ]
    for tools in ([SHELL], [PATCH]):
        events = raw_events(gateway, {"model": "m", "input": "go", "tools": tools})
        for name, data in events:
            assert name == data["type"]
            EVENTS[data["type"]].model_validate(data)
        Response.model_validate(events[-1][1]["response"])
    assert [data["type"] for _, data in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_unary_answer_validates_against_the_sdks_model(gateway, upstream):
    upstream.fake.script = [Reply(text="ok", reasoning="r", tool_calls=[("shell", {"command": ["ls"]})])]
    body = {"model": "m", "input": "go", "tools": [SHELL]}
    answer = httpx.post(gateway.url + "/v1/responses", json=body, timeout=10)
    assert answer.status_code == 200
    Response.model_validate(answer.json())


def test_length_cut_is_incomplete(gateway, upstream):
    upstream.fake.script = [Reply(text="a b", finish_reason="length"), Reply(text="a b", finish_reason="length")]
    response = oai(gateway).responses.create(model="m", input="go", max_output_tokens=2)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[-1].status == "incomplete"
    events = list(oai(gateway).responses.create(model="m", input="go", max_output_tokens=2, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.status == "incomplete"
    assert upstream.fake.requests[0]["max_tokens"] == 2


# ------------------------------------------------------------------ multi-turn input


def test_function_call_round_trip_translates_items_and_extends_the_prompt(gateway, upstream):
    """The client sends back the output items and the tool outputs: one assistant message with the calls
    (arguments verbatim), then one tool message per output, so the next prompt extends the last exactly."""
    calls = [("shell", {"command": ["ls"]}), ("shell", {"command": ["cat", "a.txt"]})]
    upstream.fake.script = [Reply(text="Looking.", tool_calls=calls), Reply(text="done")]
    client = oai(gateway)
    first = client.responses.create(model="m", instructions="sys", input="look", tools=[SHELL])
    history = [{"role": "user", "content": [{"type": "input_text", "text": "look"}]}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history += [
        {"type": "function_call_output", "call_id": first.output[1].call_id, "output": "a.txt"},
        {"type": "function_call_output", "call_id": first.output[2].call_id, "output": "hello"},
    ]
    second = client.responses.create(model="m", instructions="sys", input=history, tools=[SHELL])
    assert second.output_text == "done"

    sent = upstream.fake.requests[1]["messages"]
    answered = upstream.fake.requests[0]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert sent[2] == {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [
            {"id": item.call_id, "type": "function", "function": {"name": "shell", "arguments": item.arguments}}
            for item in first.output[1:]
        ],
    }
    assert sent[3] == {"role": "tool", "tool_call_id": first.output[1].call_id, "content": "a.txt"}
    assert sent[4] == {"role": "tool", "tool_call_id": first.output[2].call_id, "content": "hello"}
    assert answered["messages"] == sent[:2]

    first_record, second_record = gateway.records()
    assert second_record.prefix == {"previous_turn": 0, "extends": True}
    assert second_record.prompt_token_ids[: len(first_record.prompt_token_ids)] == first_record.prompt_token_ids


def test_every_kind_of_input_item(gateway, upstream):
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "x"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"command":["ls"]}'},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "listing"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
            ],
        },
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done!"},
        {"type": "message", "role": "system", "content": "late rule"},
        {"type": "message", "role": "user", "content": "next"},
    ]
    oai(gateway).responses.create(model="m", instructions="base", input=items, tools=[SHELL, PATCH])
    sent = upstream.fake.requests[0]
    assert sent["messages"] == [
        {"role": "system", "content": "base\n\nrules"},
        {"role": "user", "content": "a\n\nb"},
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"command":["ls"]}'}},
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "apply_patch", "arguments": '{"input":"*** Begin Patch"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "listing"},
        {"role": "tool", "tool_call_id": "c2", "content": "Done!"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "system", "content": "late rule"},
        {"role": "user", "content": "next"},
    ]
    patch = sent["tools"][1]["function"]
    assert patch["name"] == "apply_patch" and patch["parameters"]["required"] == ["input"]


def test_custom_tool_calls_go_back_as_custom_tool_call_items(gateway, upstream):
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    upstream.fake.script = [Reply(text="", tool_calls=[("apply_patch", {"input": patch})]) for _ in range(2)]
    client = oai(gateway)
    (item,) = client.responses.create(model="m", input="patch it", tools=[PATCH]).output
    assert (item.type, item.name, item.input) == ("custom_tool_call", "apply_patch", patch)
    events = list(client.responses.create(model="m", input="patch it", tools=[PATCH], stream=True))
    (done,) = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert done.input == patch and events[-1].response.output[0].input == patch


def test_hosted_tools_are_left_out_and_the_model_is_offered_the_rest(gateway, upstream):
    """Codex sends `web_search` and a `namespace` of subagent tools beside its functions: the chat upstream
    cannot run them, so they are dropped; with nothing else offered, no tools and no tool_choice go upstream."""
    namespace = {"type": "namespace", "name": "multi_agent_v1", "tools": [{"type": "function", "name": "spawn"}]}
    hosted = [{"type": "web_search", "external_web_access": True}, namespace, {"type": "local_shell"}]
    upstream.fake.script = [Reply(text="ok"), Reply(text="ok")]
    client = oai(gateway)
    client.responses.create(model="m", input="hi", tools=[*hosted[:2], SHELL, hosted[2]], tool_choice="auto")
    client.responses.create(model="m", input="hi", tools=hosted, tool_choice="auto")
    with_shell, bare = upstream.fake.requests
    assert [tool["function"]["name"] for tool in with_shell["tools"]] == [SHELL["name"]]
    assert with_shell["tool_choice"] == "auto" and "tools" not in bare and "tool_choice" not in bare


# ------------------------------------------------------------------ settings


def test_model_settings_apply_to_responses_calls(make_gateway, upstream):
    gw = make_gateway(
        model_override="served/model",
        temperature=0.7,
        top_p=0.9,
        max_tokens_cap=100,
        disable_thinking=True,
        inner_system_as_user=True,
    )
    items = [
        {"role": "developer", "content": "first rules"},
        {"role": "user", "content": "hi"},
        {"role": "developer", "content": "later rules"},
    ]
    response = oai(gw).responses.create(
        model="gpt-x",
        instructions="sys",
        input=items,
        max_output_tokens=5000,
        temperature=0.1,
        reasoning={"effort": "high"},
    )
    assert response.model == "gpt-x"  # the client's model, as the Anthropic dialect answers
    sent = upstream.fake.requests[0]
    assert sent["model"] == "served/model" and sent["temperature"] == 0.7 and sent["top_p"] == 0.9
    assert sent["max_tokens"] == 100 and sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["reasoning_effort"] == "high"
    assert sent["messages"] == [
        {"role": "system", "content": "sys\n\nfirst rules"},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "later rules"},
    ]
    assert gw.records()[0].request["model"] == "served/model"


def test_the_rollout_path_and_token_apply(make_gateway, upstream, tmp_path):
    token = "t" * 24
    gw = make_gateway(rollout_id="r-9", client_token=token)
    upstream.fake.script = [Reply(text="ok")]
    client = openai.OpenAI(base_url=gw.url + "/r/r-9/v1", api_key=token, max_retries=0)
    assert client.responses.create(model="m", input="hi").output_text == "ok"
    with pytest.raises(openai.AuthenticationError) as denied:
        openai.OpenAI(base_url=gw.url + "/r/r-9/v1", api_key="wrong", max_retries=0).responses.create(
            model="m", input="hi"
        )
    assert denied.value.body["type"] == "authentication_error" and denied.value.body["code"] is None
    assert [(r.rollout_id, r.dialect) for r in gw.records()] == [("r-9", "responses")]


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type", "'web_search_call' cannot be sent"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "stores no items"),
        (
            {"input": [{"type": "function_call", "name": "x", "arguments": "{}"}]},
            "input[0].call_id",
            "expected a string",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "expected 'user'"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
            "input_file",
        ),
        ({"input": "hi", "tools": [{"type": "function", "parameters": {}}]}, "tools[0].name", "expected a string"),
        ({"input": "hi", "tool_choice": {"type": "file_search"}}, "tool_choice.type", "unsupported tool_choice"),
        ({"input": "hi", "text": {"format": {"type": "grammar"}}}, "text.format.type", "unsupported format"),
        ({"input": "hi", "max_output_tokens": "9"}, "max_output_tokens", "expected an integer"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation", "keeps no conversations"),
        ({}, "input", "missing"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(gateway, upstream, body, param, message):
    with pytest.raises(openai.BadRequestError) as refused:
        oai(gateway).responses.create(model="m", **body)
    error = refused.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["code"] is None
    assert message in error["message"] and error["message"].startswith(param)
    assert upstream.fake.requests == [] and gateway.records() == []


def test_previous_response_id_is_refused_with_the_field_named(gateway, upstream):
    with pytest.raises(openai.BadRequestError) as refused:
        oai(gateway).responses.create(model="m", input="more", previous_response_id="resp_123")
    error = refused.value.body
    assert error["param"] == "previous_response_id" and error["code"] == "previous_response_not_found"
    assert "send the whole conversation in `input`" in error["message"]
    assert upstream.fake.requests == []


@pytest.mark.parametrize(
    ("status", "expected", "error_type"),
    [(400, 400, "invalid_request_error"), (500, 500, "api_error"), (503, 529, "overloaded_error")],
)
def test_upstream_errors_map_as_for_the_anthropic_dialect(gateway, upstream, status, expected, error_type):
    upstream.fake.script = [Fault(status=status, message="context too long")]
    with pytest.raises(openai.APIStatusError) as caught:
        oai(gateway).responses.create(model="m", input="hi")
    assert caught.value.status_code == expected and caught.value.body["type"] == error_type
    assert "context too long" in caught.value.body["message"]
    assert set(caught.value.body) == {"message", "type", "param", "code"}
    record = gateway.records()[0]
    assert record.upstream_status == status and record.response is None and record.dialect == "responses"


def test_a_streaming_request_gets_a_real_status_and_retry_after(gateway, upstream):
    upstream.fake.script = [Fault(status=429, headers={"retry-after": "3"})]
    response = httpx.post(gateway.url + "/v1/responses", json={"model": "m", "input": "hi", "stream": True})
    assert response.status_code == 429 and response.headers["retry-after"] == "3"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_the_sdk_retries_and_the_retry_is_marked(gateway, upstream):
    upstream.fake.script = [Fault(status=500), Reply(text="recovered")]
    assert oai(gateway, retries=1).responses.create(model="m", input="hi").output_text == "recovered"
    first, second = gateway.records()
    assert first.upstream_status == 500 and second.retry_of == first.turn


@pytest.mark.parametrize(
    ("reply", "error", "kept"),
    [
        (Reply(text="one two three four", reset_after=2), "upstream stream cut mid-way", 2),
        (Reply(text="one two three", error_after=1), "upstream error in stream: scripted engine failure", 1),
    ],
    ids=["connection reset", "vLLM error payload"],
)
def test_a_stream_broken_after_it_started_ends_with_response_failed(gateway, upstream, reply, error, kept):
    upstream.fake.script = [reply]
    events = list(oai(gateway).responses.create(model="m", input="hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error" and error in failed.error.message
    assert not any(e.type == "response.completed" for e in events)
    record = gateway.records()[0]
    assert record.upstream_error.startswith(error)
    assert record.completion_token_ids == upstream.fake.emitted[0][:kept]  # what arrived is kept


def test_translation_is_pure_and_keeps_the_client_body():
    body = {"model": "m", "input": "hi", "tools": [SHELL], "store": False, "include": ["reasoning.encrypted_content"]}
    before = orjson.dumps(body)
    translated = responses_to_openai(body)
    assert orjson.dumps(body) == before and translated.custom_tools == frozenset()
    assert set(translated.body) == {"model", "messages", "tools"}
    # Chat completions refuse a tool_choice without tools: both go only with tools.
    bare = responses_to_openai({"model": "m", "input": "hi", "tool_choice": "auto", "parallel_tool_calls": False})
    assert set(bare.body) == {"model", "messages"}
    with_tools = responses_to_openai({**body, "tool_choice": "required", "parallel_tool_calls": False}).body
    assert (with_tools["tool_choice"], with_tools["parallel_tool_calls"]) == ("required", False)
