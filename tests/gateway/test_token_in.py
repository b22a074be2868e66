"""Token-in continuation with the real anthropic and openai SDKs as clients, against a scripted model in a real
tokenizer's ids that samples non-canonical tokenizations: re-tokenizing the history drifts on the chat route, and
token-in's prompts extend every earlier turn's prompt + sampled ids exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import anthropic
import openai
import pytest

from agentbake.errors import ConfigError
from agentbake.export.api import export_trace
from agentbake.gateway import GatewayConfig, check, create_app
from agentbake.gateway.template import FolderTemplate
from agentbake.gateway.token_in import TokenIn, completions_body
from agentbake.gateway.trace import load_trace
from agentbake.scripted import Reply, ScriptedModel
from agentbake.serve import serve_in_thread

from .conftest import tool_calls_so_far

TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }
]
STEPS = 3


def agent(request: dict) -> Reply:
    """A shell command per step (arguments whose JSON merges across the parts the model samples), then a text."""
    step = tool_calls_so_far(request)
    if step < STEPS:
        return Reply(text="", tool_calls=[("Bash", {"command": f'ls -la /tmp/dir{step} && echo "step {step}"'})])
    return Reply(text="All done.")


def converse(
    url: str, *, stream: bool, first: str = "Do the thing.", tools: list[dict[str, Any]] = TOOLS
) -> list[list[dict[str, Any]]]:
    """An Anthropic-SDK agent loop to the end of the task; the content blocks of each answer."""
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    answers = []
    for _ in range(STEPS + 1):
        if stream:
            with client.messages.stream(model="m", max_tokens=400, tools=tools, messages=messages) as events:
                answer = events.get_final_message()
        else:
            answer = client.messages.create(model="m", max_tokens=400, tools=tools, messages=messages)
        blocks = [block.model_dump(exclude_none=True, exclude={"parsed_output"}) for block in answer.content]
        answers.append(blocks)
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if not uses:
            break
        results = [
            {"type": "tool_result", "tool_use_id": u["id"], "content": f"ran {u['input']['command']}"} for u in uses
        ]
        messages.append({"role": "user", "content": results})
    return answers


def gateway_on(model_url: str, trace: Path, **settings: Any):
    config = GatewayConfig(upstream=model_url + "/v1", trace=trace, read_timeout_s=60.0, **settings)
    return serve_in_thread(create_app(config), log_level="critical")


def without_ids(answers: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    return [[{k: v for k, v in block.items() if k != "id"} for block in blocks] for blocks in answers]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
@pytest.mark.parametrize("source", ["folder", "server"])
def test_token_in_prompts_extend_every_turn_exactly_where_the_chat_route_drifts(
    drifting_model: tuple[ScriptedModel, str], tokenizer_dir: Path, tmp_path: Path, stream: bool, source: str
) -> None:
    """The template and tokenizer from the tokenizer folder, or from the server (`/tokenizer_info`, `/tokenize`)."""
    model, url = drifting_model
    model.responder = agent
    runs = {}
    for token_in in (False, True):
        trace = tmp_path / f"trace-{token_in}.jsonl"
        with gateway_on(
            url, trace, token_in=token_in, tokenizer=tokenizer_dir if source == "folder" else None
        ) as gateway:
            model.emitted.clear()
            model.paths.clear()
            answers = converse(gateway.url + "/r/r1", stream=stream)
        runs[token_in] = (answers, load_trace(trace), list(model.emitted), list(model.paths))

    chat_answers, chat_trace, _, chat_paths = runs[False]
    answers, trace, emitted, paths = runs[True]
    assert without_ids(answers) == without_ids(chat_answers)  # the agent gets the same answers either way
    assert [b["type"] for b in answers[-1]] == ["text"] and len(answers) == STEPS + 1
    assert [b["input"] for blocks in answers for b in blocks if b["type"] == "tool_use"] == [
        {"command": f'ls -la /tmp/dir{n} && echo "step {n}"'} for n in range(STEPS)
    ]

    # The chat route re-tokenizes the history: every later prompt diverges inside what was sampled, and says so.
    (chat_check,) = check(chat_trace.records)
    assert chat_check.rerendered == STEPS and not chat_check.consistent
    assert chat_paths == ["/v1/chat/completions"] * (STEPS + 1)
    assert all(r.token_in is None for r in chat_trace.records)

    # Token-in: the first call takes the chat route (nothing to continue), every later one continues the one before.
    records = trace.records
    tokenized = ["/tokenize"] if source == "server" else []  # the new messages' ids, by the server
    assert paths == ["/v1/chat/completions"] + [*tokenized, "/v1/completions"] * STEPS
    assert records[0].token_in == {
        "route": "chat",
        "reason": "no earlier call of this rollout is the start of this conversation",
    }
    for n, record in enumerate(records[1:], start=1):
        previous = records[n - 1]
        assert record.token_in["route"] == "completions" and record.token_in["continues"] == n - 1
        whole = previous.prompt_token_ids + previous.completion_token_ids
        assert record.prompt_token_ids[: len(whole)] == whole  # zero drift
        assert len(record.prompt_token_ids) == len(whole) + record.token_in["new_tokens"]
        assert record.prefix == {"previous_turn": n - 1, "extends": True}
        assert record.request["messages"][-1]["role"] == "tool"  # the record keeps the chat request
        assert record.capture["verdict"] == "complete"
    (token_check,) = check(records)
    assert token_check.consistent and token_check.extends == STEPS
    assert [r.completion_token_ids for r in records] == emitted  # captured as the model sampled them

    # The export: one agent sequence holding exactly the sampled ids, trained there only.
    document = export_trace(trace, "r1")
    (sequence,) = document["sequences"]
    assert sequence["role"] == "agent" and document["validation"]["trainable"]
    trained = [i for i, m in zip(sequence["input_ids"], sequence["loss_mask"], strict=True) if m]
    assert trained == [i for ids in emitted for i in ids]
    assert sequence["input_ids"] == records[-1].prompt_token_ids + records[-1].completion_token_ids
    chat_document = export_trace(chat_trace, "r1")
    assert len(chat_document["sequences"]) == STEPS + 1  # the drift breaks the rollout into one path per call


def test_a_request_that_does_not_extend_the_session_falls_back_to_the_chat_route_and_says_why(
    drifting_model: tuple[ScriptedModel, str], tokenizer_dir: Path, tmp_path: Path
) -> None:
    model, url = drifting_model
    model.responder = agent
    trace = tmp_path / "trace.jsonl"
    with gateway_on(url, trace, tokenizer=tokenizer_dir) as gateway:  # on by default with a tokenizer
        client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
        first = [{"role": "user", "content": "Do the thing."}]
        answer = client.messages.create(model="m", max_tokens=400, tools=TOOLS, messages=first)
        (use,) = [b.model_dump(exclude_none=True) for b in answer.content if b.type == "tool_use"]
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "ok"}]}
        edited = {**use, "input": {"command": "rm -rf /"}}
        client.messages.create(  # the history says the model called another command
            model="m",
            max_tokens=400,
            tools=TOOLS,
            messages=[*first, {"role": "assistant", "content": [edited]}, result],
        )
        client.messages.create(  # another tool list renders another system prompt
            model="m",
            max_tokens=400,
            tools=[*TOOLS, {**TOOLS[0], "name": "Other"}],
            messages=[*first, {"role": "assistant", "content": [use]}, result],
        )
        client.messages.create(
            model="m",
            max_tokens=400,
            tools=TOOLS,
            tool_choice={"type": "any"},
            messages=[*first, {"role": "assistant", "content": [use]}, result],
        )
        client.messages.create(
            model="m", max_tokens=400, tools=TOOLS, messages=[*first, {"role": "assistant", "content": [use]}, result]
        )
    reasons = [r.token_in.get("reason") for r in load_trace(trace).records]
    assert reasons == [
        "no earlier call of this rollout is the start of this conversation",
        "message 1 is not the answer turn 0 sampled (an edited history)",
        "the tools or template settings differ from turn 0's",
        "the completions route does not serve tool_choice",
        None,  # the unedited continuation
    ]


def test_an_upstream_without_the_completions_route_gets_every_call_on_the_chat_route(
    drifting_model: tuple[ScriptedModel, str], tokenizer_dir: Path, tmp_path: Path
) -> None:
    model, url = drifting_model
    model.responder = agent
    model.completions_supported = False
    trace = tmp_path / "t.jsonl"
    with gateway_on(url, trace, token_in=True, tokenizer=tokenizer_dir) as gateway:
        answers = converse(gateway.url, stream=True)
    assert [b["type"] for b in answers[-1]] == ["text"] and len(answers) == STEPS + 1
    unavailable = "the upstream answered /v1/completions with 404: it serves the chat route only"
    assert [r.token_in.get("reason") for r in load_trace(trace).records][1:] == [unavailable] * STEPS
    # One call tried the completions route; every later one went straight to the chat route.
    assert model.paths.count("/v1/completions") == 1


def test_a_server_that_stops_tokenizing_gets_those_calls_on_the_chat_route(
    drifting_model: tuple[ScriptedModel, str], tmp_path: Path
) -> None:
    model, url = drifting_model
    model.responder = agent
    trace = tmp_path / "t.jsonl"
    with gateway_on(url, trace, token_in=True) as gateway:  # the template from /tokenizer_info
        model.tokenize_supported = False
        answers = converse(gateway.url, stream=False)
    assert [b["type"] for b in answers[-1]] == ["text"]
    reasons = [r.token_in.get("reason") for r in load_trace(trace).records][1:]
    assert reasons == ["the server's /tokenize did not tokenize the new messages"] * STEPS


def test_the_openai_dialect_gets_parsed_tool_calls_and_no_injected_fields(
    drifting_model: tuple[ScriptedModel, str], tokenizer_dir: Path, tmp_path: Path
) -> None:
    model, url = drifting_model
    model.responder = agent
    bash = {"type": "function", "function": {"name": "Bash", "parameters": TOOLS[0]["input_schema"]}}
    with gateway_on(url, tmp_path / "t.jsonl", token_in=True, tokenizer=tokenizer_dir) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Do the thing."}]
        for _ in range(2):
            answer = client.chat.completions.create(model="m", messages=messages, tools=[bash], max_tokens=400)
            message = answer.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            (call,) = message.tool_calls
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
    assert model.paths[-1] == "/v1/completions"
    assert answer.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.function.arguments) == {"command": 'ls -la /tmp/dir1 && echo "step 1"'}
    assert call.id.startswith("chatcmpl-tool-")
    extra = answer.model_extra or {}
    assert "prompt_token_ids" not in extra and answer.choices[0].logprobs is None  # the gateway's own asks


def test_the_responses_dialect_streams_through_token_in(
    drifting_model: tuple[ScriptedModel, str], tokenizer_dir: Path, tmp_path: Path
) -> None:
    model, url = drifting_model
    model.responder = agent
    bash = {"type": "function", "name": "Bash", "parameters": TOOLS[0]["input_schema"]}
    trace = tmp_path / "t.jsonl"
    with gateway_on(url, trace, tokenizer=tokenizer_dir) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
        items: list[Any] = [{"role": "user", "content": "Do the thing."}]
        for _ in range(STEPS + 1):
            with client.responses.stream(model="m", input=items, tools=[bash]) as events:
                response = events.get_final_response()
            items += [item.model_dump(exclude_none=True) for item in response.output]
            calls = [item for item in response.output if item.type == "function_call"]
            items += [{"type": "function_call_output", "call_id": c.call_id, "output": "ok"} for c in calls]
    assert response.output_text == "All done." and not calls
    records = load_trace(trace).records
    assert [r.token_in["route"] for r in records] == ["chat"] + ["completions"] * STEPS
    assert all(r.prefix["extends"] for r in records[1:])


def test_token_in_asked_for_without_a_usable_template_refuses_to_start(tokenizer_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("token_in: http://127.0.0.1:9/tokenizer_info: cannot read")):
        create_app(GatewayConfig(upstream="http://127.0.0.1:9/v1", token_in=True))
    with pytest.raises(ConfigError, match=f"tokenizer {tmp_path}: no tokenizer.json there"):
        create_app(GatewayConfig(upstream="http://127.0.0.1:9/v1", tokenizer=tmp_path))
    # A template whose rendering of a conversation's start changes as it grows: token-in could not be exact.
    folder = tmp_path / "counting"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
        "{{ messages | length }}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="token-in would not be exact: its chat template renders the first 2"):
        create_app(GatewayConfig(upstream="http://127.0.0.1:9/v1", token_in=True, tokenizer=folder))
    gateway = create_app(GatewayConfig(upstream="http://127.0.0.1:9/v1", tokenizer=folder))  # unset: stays off
    assert gateway.calls.token_in is None


def test_the_completions_request_keeps_the_chat_requests_sampling_and_capture_fields() -> None:
    chat = {
        "model": "m",
        "messages": [],
        "tools": [{"type": "function", "function": {"name": "Bash"}}],
        "temperature": 0.7,
        "stop": ["END"],
        "logprobs": True,
        "top_logprobs": 1,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"enable_thinking": False},
    }
    body = completions_body(chat, [1, 2, 3])
    assert body == {
        "model": "m",
        "prompt": [1, 2, 3],
        "max_tokens": None,  # the rest of the context, as the chat route; absent would be 16 tokens
        "temperature": 0.7,
        "stop": ["END"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "logprobs": 1,
        "skip_special_tokens": False,  # with tools, as vLLM's hermes parser asks
    }
    plain = completions_body({"model": "m", "messages": [], "max_completion_tokens": 50}, [1])
    assert plain == {"model": "m", "prompt": [1], "max_tokens": 50}


def test_a_main_conversation_is_continued_across_its_sub_agents_calls(tokenizer_dir: Path) -> None:
    planner = TokenIn(FolderTemplate(tokenizer_dir))
    eos = planner.template.eos_id
    main = [{"role": "user", "content": "The main task."}]
    answer = {"role": "assistant", "content": "Working on it."}
    planner.answered("r", 0, {"messages": main}, [5, 6], [7, eos], answer)
    turn = 1
    for agent in range(12):  # sub-agents of two turns each, between two calls of the main agent
        first = [{"role": "user", "content": f"Sub-task {agent}."}]
        assert planner.plan("r", {"messages": first}).prefix is None
        planner.answered("r", turn, {"messages": first}, [5], [8, eos], answer)
        second = {"messages": [*first, answer, {"role": "user", "content": "More."}]}
        assert planner.plan("r", second).record == {"route": "completions", "continues": turn}
        planner.answered("r", turn + 1, second, [5, 8, eos, 9], [8, eos], answer, continued=turn)
        turn += 2
    plan = planner.plan("r", {"messages": [*main, answer, {"role": "user", "content": "Go on."}]})
    assert plan.record == {"route": "completions", "continues": 0}
    assert plan.prefix == [5, 6, 7, eos]


def test_a_template_that_opens_think_gets_the_answers_reasoning_as_thinking(
    drifting_model: tuple[ScriptedModel, str], tokenizer_dir: Path, tmp_path: Path
) -> None:
    """Qwen3.5-style: the generation prompt ends in `<think>`, the answer holds only `</think>`."""
    folder = tmp_path / "opens-think"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tokenizer_dir / name).read_bytes())
    template = (tokenizer_dir / "chat_template.jinja").read_text()
    opening = "{{- '<|im_start|>assistant\\n' }}"
    assert opening in template
    (folder / "chat_template.jinja").write_text(
        template.replace(opening, "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    )
    model, url = drifting_model
    model.script = [
        Reply(text="", tool_calls=[("Bash", {"command": "ls"})]),
        Reply(text="The listing looks right.</think>\n\nDone."),
    ]
    with gateway_on(url, tmp_path / "t.jsonl", token_in=True, tokenizer=folder) as gateway:
        answers = converse(gateway.url, stream=True)
    assert model.paths[-1] == "/v1/completions"
    assert answers[-1] == [
        {"type": "thinking", "thinking": "The listing looks right.", "signature": ANY},
        {"type": "text", "text": "\n\nDone."},
    ]
