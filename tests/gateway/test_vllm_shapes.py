"""Every wire shape of vLLM 0.34 through the gateway, streaming and unary, in all four dialects.

The scripted upstream emits each shape exactly as vLLM does (tests/scripted/test_contract.py holds it to
typed models of vLLM's answers). The official SDKs are the clients. The truth is the upstream's own wire:
the request the gateway sent is replayed straight to the scripted model (deterministic: same request, same
answer) and its raw SSE frames or body are parsed here, independently of the gateway. The record must hold
exactly those ids and logprob values (and raw entries), one record per call, with the right verdict; the
client must get a whole answer (or the error the upstream reported), never a cut stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from agentbake.gateway import GatewayConfig, create_app, read_trace
from agentbake.scripted import Fault, Reply
from agentbake.serve import serve_in_thread

USER = [{"role": "user", "content": "hi"}]
CALLS = [("Bash", {"command": "ls -la"}), ("Write", {"file_path": "a.txt", "content": "é\n"})]
STOP_TOKEN = 151643


@dataclass
class Shape:
    name: str
    reply: Reply | Fault
    unary: Reply | Fault | None = None
    """What the upstream answers a unary call (default: `reply`)."""
    verdict: dict[str, str] = field(default_factory=lambda: {"stream": "complete", "unary": "complete"})
    reason: str | dict[str, str] | None = None
    """A reason the partial/none verdict must name (per mode when a dict)."""
    stop: list[str] = field(default_factory=list)
    anthropic_stop: str = "end_turn"


def partial_in(mode: str) -> dict[str, str]:
    return {"stream": "complete", "unary": "complete", mode: "partial"}


SHAPES = [
    Shape("default", Reply(text="Hi there, friend.")),
    Shape("minus-inf-kept", Reply(text="a b c", logprob_values={1: -math.inf})),
    Shape("nan-null", Reply(text="a b c", logprob_values={1: math.nan}, nan_unary="null"), verdict={}, reason="null"),
    Shape(
        "nan-vllm-unary-400",
        Reply(text="a b c", logprob_values={1: math.nan}),
        verdict={"stream": "partial", "unary": "none"},
        reason={"stream": "null", "unary": "upstream error"},
    ),
    Shape(
        "fallback-entries", Reply(text="a b c", fallback_entries=[0, 2]), verdict=partial_in("stream"), reason="null"
    ),
    Shape("multi-token-steps", Reply(text="a b c d e f g", step_tokens=3)),
    Shape(
        "tool-calls-empty-deltas",
        Reply(text="Two calls.", tool_calls=CALLS),
        anthropic_stop="tool_use",
    ),
    Shape("reasoning", Reply(reasoning="think it over", text="done")),
    Shape("reasoning-content", Reply(reasoning="think it over", text="done", reasoning_field="reasoning_content")),
    Shape("reasoning-parser", Reply(reasoning="hm hm", text="ok", reasoning_parser=True)),
    Shape("keep-alive", Reply(text="a b c", keep_alive=True)),
    Shape("ids-as-key", Reply(text="a b", id_form="key")),
    Shape(
        "error-envelope",
        Reply(text="a b c d", error_after=2),
        unary=Fault(status=500, message="scripted engine failure"),
        verdict={"stream": "partial", "unary": "none"},
        reason="upstream error",
    ),
    Shape(
        "error-400",
        Fault(status=400, message="bad top_logprobs", param="top_logprobs"),
        verdict={"stream": "none", "unary": "none"},
        reason="upstream error",
    ),
    Shape("length", Reply(text="a b", finish_reason="length"), anthropic_stop="max_tokens"),
    Shape("abort", Reply(text="a b", finish_reason="abort"), anthropic_stop="max_tokens"),
    Shape("repetition", Reply(text="a a a", finish_reason="repetition")),
    Shape("stop-reason-token-id", Reply(text="x y", matched_stop=STOP_TOKEN)),
    Shape("stop-reason-string", Reply(text="x y", matched_stop="END"), stop=["END"], anthropic_stop="stop_sequence"),
]


@dataclass
class Wire:
    """What the upstream sent, parsed from its raw bytes."""

    status: int
    entries: list[dict] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    prompt_ids: list[int] | None = None
    finish: str | None = None
    error: dict | None = None
    comments: int = 0


def replay(url: str, request: dict, script: Reply | Fault) -> Wire:
    """Send the gateway's upstream request again, straight to the scripted model, and parse its answer."""
    target = url + "/v1/chat/completions"
    if not request.get("stream"):
        response = httpx.post(target, json=request, timeout=10)
        body = response.json()
        wire = Wire(response.status_code)
        if response.status_code != 200:
            wire.error = body
            return wire
        choice = body["choices"][0]
        wire.entries = choice["logprobs"]["content"] if choice["logprobs"] else []
        wire.token_ids = choice["token_ids"] or []
        wire.prompt_ids, wire.finish = body["prompt_token_ids"], choice["finish_reason"]
        return wire
    with httpx.stream("POST", target, json=request, timeout=10) as response:
        wire = Wire(response.status_code)
        if response.status_code != 200:
            wire.error = orjson.loads(response.read())
            return wire
        frames = [line for line in response.iter_lines() if line]
    for line in frames:
        if line.startswith(":"):
            wire.comments += 1
            continue
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            continue
        chunk = orjson.loads(data)
        if "error" in chunk:
            wire.error = chunk
            continue
        if chunk.get("prompt_token_ids") is not None:
            assert wire.prompt_ids is None, "prompt_token_ids on more than one chunk"
            wire.prompt_ids = chunk["prompt_token_ids"]
        for choice in chunk["choices"]:
            if choice.get("logprobs"):
                wire.entries += choice["logprobs"]["content"]
            wire.token_ids += choice.get("token_ids") or []
            wire.finish = choice.get("finish_reason") or wire.finish
    return wire


def wire_id(entry: dict) -> int:
    return entry["token_id"] if "token_id" in entry else int(entry["token"].removeprefix("token_id:"))


def refused(script: Reply | Fault, stream: bool) -> bool:
    """The upstream answers with an HTTP error: a fault, or vLLM's 400 for a NaN logprob in a unary answer."""
    if isinstance(script, Fault):
        return True
    return not stream and script.nan_unary == "error" and any(math.isnan(v) for v in script.logprob_values.values())


def expected_text(reply: Reply | Fault) -> tuple[str, str]:
    assert isinstance(reply, Reply)
    return reply.text, reply.reasoning


def run_openai(gw, shape: Shape, stream: bool, script: Reply | Fault) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
    kwargs: dict[str, Any] = {"model": "m", "messages": USER}
    if shape.stop:
        kwargs["stop"] = shape.stop
    if refused(script, stream):
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(stream=stream, **kwargs)
        assert raised.value.status_code == (script.status if isinstance(script, Fault) else 400)
        return
    if not stream:
        answer = client.chat.completions.create(**kwargs)
        choice = answer.choices[0]
        message = choice.message
        text, reasoning = expected_text(script)
        assert (message.content or "") == text
        assert choice.finish_reason == (script.finish_reason or ("tool_calls" if script.tool_calls else "stop"))
        assert (message.model_extra or {}).get(script.reasoning_field) == (reasoning or None)
        assert [c.function.name for c in message.tool_calls or []] == [name for name, _ in script.tool_calls]
        assert choice.logprobs is None  # the gateway's own capture fields do not reach the client
        return
    text, pieces, reasoning, finish, names = "", [], "", None, []
    if script.error_after is not None:
        with pytest.raises(openai.APIError, match="scripted engine failure"):
            list(client.chat.completions.create(stream=True, **kwargs))
        return
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        assert chunk.usage is None and "prompt_token_ids" not in (chunk.model_extra or {})
        for choice in chunk.choices:
            assert choice.logprobs is None
            text += choice.delta.content or ""
            pieces.append((choice.delta.model_extra or {}).get(script.reasoning_field) or "")
            names += [c.function.name for c in choice.delta.tool_calls or [] if c.function.name]
            finish = choice.finish_reason or finish
    reasoning = "".join(pieces)
    assert text == script.text and reasoning == script.reasoning
    assert names == [name for name, _ in script.tool_calls]
    assert finish == (script.finish_reason or ("tool_calls" if script.tool_calls else "stop"))


def run_anthropic(gw, shape: Shape, stream: bool, script: Reply | Fault) -> None:
    client = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0)
    kwargs: dict[str, Any] = {"model": "m", "max_tokens": 200, "messages": USER}
    if shape.stop:
        kwargs["stop_sequences"] = shape.stop
    if refused(script, stream):
        with pytest.raises(anthropic.APIStatusError) as raised:
            if stream:
                with client.messages.stream(**kwargs) as events:
                    events.get_final_message()
            else:
                client.messages.create(**kwargs)
        assert raised.value.status_code == (script.status if isinstance(script, Fault) else 400)
        return
    if stream and script.error_after is not None:
        with pytest.raises(anthropic.APIError, match="scripted engine failure"), client.messages.stream(**kwargs) as s:
            s.get_final_message()
        return
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    text, reasoning = expected_text(script)
    assert "".join(b.text for b in message.content if b.type == "text") == text
    assert "".join(b.thinking for b in message.content if b.type == "thinking") == reasoning
    assert [b.name for b in message.content if b.type == "tool_use"] == [name for name, _ in script.tool_calls]
    assert [b.input for b in message.content if b.type == "tool_use"] == [args for _, args in script.tool_calls]
    assert message.stop_reason == shape.anthropic_stop
    assert message.stop_sequence == ("END" if shape.anthropic_stop == "stop_sequence" else None)


def run_responses(gw, shape: Shape, stream: bool, script: Reply | Fault) -> None:
    """The Responses dialect has no stop sequences: a matched stop string is an ordinary `completed`."""
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
    kwargs: dict[str, Any] = {"model": "m", "input": "hi"}
    if refused(script, stream):
        with pytest.raises(openai.APIStatusError) as raised:
            client.responses.create(stream=stream, **kwargs)
        assert raised.value.status_code == (script.status if isinstance(script, Fault) else 400)
        return
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        assert [e.sequence_number for e in events] == list(range(len(events)))
        if script.error_after is not None:
            assert events[-1].type == "response.failed"
            assert "scripted engine failure" in events[-1].response.error.message
            return
        response = events[-1].response
    else:
        response = client.responses.create(**kwargs)
    text, reasoning = expected_text(script)
    items = response.output
    assert response.output_text == text
    assert "".join(part.text for i in items if i.type == "reasoning" for part in i.content) == reasoning
    calls = [(i.name, orjson.loads(i.arguments)) for i in items if i.type == "function_call"]
    assert calls == [(name, args) for name, args in script.tool_calls]
    cut = script.finish_reason in ("length", "abort")
    assert response.status == ("incomplete" if cut else "completed")


def run_google(gw, shape: Shape, stream: bool, script: Reply | Fault) -> None:
    """Gemini has no stop-sequence reason: a matched stop string is an ordinary STOP; thoughts are asked for."""
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=gw.url, api_version="v1beta"))
    config = genai_types.GenerateContentConfig(
        stop_sequences=shape.stop or None, thinking_config=genai_types.ThinkingConfig(include_thoughts=True)
    )
    kwargs: dict[str, Any] = {"model": "m", "contents": "hi", "config": config}
    if refused(script, stream):
        with pytest.raises(genai_errors.APIError) as raised:
            if stream:
                list(client.models.generate_content_stream(**kwargs))
            else:
                client.models.generate_content(**kwargs)
        assert raised.value.code == (script.status if isinstance(script, Fault) else 400)
        return
    if stream and script.error_after is not None:
        with pytest.raises(genai_errors.ServerError, match="scripted engine failure"):
            list(client.models.generate_content_stream(**kwargs))
        return
    answers = (
        list(client.models.generate_content_stream(**kwargs)) if stream else [client.models.generate_content(**kwargs)]
    )
    parts = [part for answer in answers for part in (answer.candidates[0].content or genai_types.Content()).parts or []]
    text, reasoning = expected_text(script)
    assert "".join(p.text for p in parts if p.text and not p.thought) == text
    assert "".join(p.text for p in parts if p.text and p.thought) == reasoning
    calls = [(p.function_call.name, p.function_call.args) for p in parts if p.function_call]
    assert calls == [(name, args) for name, args in script.tool_calls]
    cut = script.finish_reason in ("length", "abort")
    assert answers[-1].candidates[0].finish_reason == ("MAX_TOKENS" if cut else "STOP")


@dataclass
class Gateway:
    url: str
    trace: Any


@pytest.fixture(scope="module")
def shapes_gateway(_upstream_server, tmp_path_factory) -> Any:
    """One gateway for every case (each its own rollout, so its own records); alternatives in the logprobs
    too, so "sampled token first" is visible."""
    _, server = _upstream_server
    trace = tmp_path_factory.mktemp("shapes") / "trace.jsonl"
    config = GatewayConfig(upstream=server.url + "/v1", trace=trace, read_timeout_s=2.0, top_logprobs=3)
    with serve_in_thread(create_app(config), log_level="critical") as served:
        yield served.url, trace


RUN = {"openai": run_openai, "anthropic": run_anthropic, "responses": run_responses, "google": run_google}


@pytest.mark.parametrize("dialect", list(RUN))
@pytest.mark.parametrize("mode", ["stream", "unary"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_vllm_shape_passes_through_intact(shapes_gateway, upstream, shape: Shape, mode: str, dialect: str):
    stream = mode == "stream"
    script = shape.reply if stream or shape.unary is None else shape.unary
    url, trace = shapes_gateway
    rollout = f"{shape.name}.{mode}.{dialect}"
    upstream.fake.script = [script]
    RUN[dialect](Gateway(f"{url}/r/{rollout}", trace), shape, stream, script)

    (record,) = [r for r in read_trace(trace) if r.rollout_id == rollout]  # exactly one, whatever happened
    sent = upstream.fake.requests[0]
    upstream.fake.script = [script]
    wire = replay(upstream.url, sent, script)
    assert record.upstream_status == wire.status
    expected = shape.verdict.get(mode, "partial")
    assert record.capture["verdict"] == expected, record.capture
    named = shape.reason.get(mode) if isinstance(shape.reason, dict) else shape.reason
    if named is not None and expected != "complete":
        assert any(named in reason for reason in record.capture["reasons"]), record.capture
    if wire.status != 200:
        assert record.response is None and record.completion_token_ids == [] and record.per_token_logps == []
        return

    # Ids: from the wire's token_ids, which its logprob entries agree with.
    assert [wire_id(e) for e in wire.entries] == wire.token_ids
    assert record.completion_token_ids == wire.token_ids == upstream.fake.emitted[0][: len(wire.token_ids)]
    assert record.prompt_token_ids == wire.prompt_ids is not None
    # Logprob values exactly as sent: -9999.0 kept; null (NaN in a stream, an absent key) stays null.
    sent_values = [e.get("logprob") for e in wire.entries]
    assert record.per_token_logps == sent_values
    assert record.logprobs == wire.entries  # raw entries, alternatives in the server's order
    for entry in record.logprobs:
        if entry.get("top_logprobs"):
            assert entry["top_logprobs"][0]["token"] == entry["token"]  # the sampled token first
    if isinstance(script, Reply) and -math.inf in script.logprob_values.values():
        assert record.per_token_logps[1] == -9999.0
    if shape.name == "nan-null" or (shape.name == "fallback-entries" and stream):
        assert None in record.per_token_logps and 0.0 not in record.per_token_logps
    assert record.finish_reason == (None if wire.error else wire.finish)
    if isinstance(script, Reply) and script.matched_stop is not None:
        assert record.response["choices"][0]["stop_reason"] == script.matched_stop
    if isinstance(script, Reply) and script.keep_alive and stream:
        assert wire.comments > 0
    if isinstance(script, Reply) and script.error_after is not None and stream:
        assert "scripted engine failure" in record.upstream_error


@pytest.mark.parametrize("dialect", list(RUN))
def test_keep_alive_comments_keep_the_client_alive_too(shapes_gateway, upstream, dialect: str):
    url, _ = shapes_gateway
    upstream.fake.script = [Reply(text="a b c", keep_alive=True)]
    if dialect == "openai":
        target, body = f"{url}/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}
    elif dialect == "responses":
        target, body = f"{url}/v1/responses", {"model": "m", "input": "hi", "stream": True}
    elif dialect == "google":
        target, body = (
            f"{url}/v1beta/models/m:streamGenerateContent?alt=sse",
            {"contents": [{"parts": [{"text": "hi"}]}]},
        )
    else:
        target, body = f"{url}/v1/messages", {"model": "m", "max_tokens": 50, "messages": USER, "stream": True}
    with httpx.stream("POST", target, json=body, timeout=10) as response:
        lines = [line for line in response.iter_lines() if line]
    if dialect == "openai":
        assert lines.count(": keep-alive") >= 4 and lines[-1] == "data: [DONE]"
    elif dialect == "responses":  # a comment per upstream keep-alive, between named events
        assert lines.count(": keep-alive") >= 4 and lines[-2] == "event: response.completed"
    elif dialect == "google":  # none: the google-genai SDK takes a comment line for a broken chunk
        assert all(line.startswith("data: ") for line in lines) and '"finishReason":"STOP"' in lines[-1]
    else:  # the initial ping, then one per upstream keep-alive
        assert lines.count("event: ping") >= 5 and lines[-2] == "event: message_stop"


def test_the_upstream_error_event_reaches_openai_clients_as_sent_then_done(shapes_gateway, upstream):
    url, _ = shapes_gateway
    upstream.fake.script = [Reply(text="a b c d", error_after=2)]
    body = {"model": "m", "messages": USER, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as response:
        lines = [line for line in response.iter_lines() if line]
    envelope = {
        "error": {"message": "scripted engine failure", "type": "InternalServerError", "param": None, "code": 500}
    }
    assert orjson.loads(lines[-2].removeprefix("data: ")) == envelope and lines[-1] == "data: [DONE]"
