"""The scripted model's output, in every variant, held against typed models of vLLM 0.34's answers.

Besides the shapes (vllm_models.py), each answer is checked for vLLM's invariants: one logprob entry per
token id, the sampled token first in `top_logprobs`, `"token_id:<n>"` names, prompt ids only on the first
chunk, the chunks' ids adding up to what was emitted and to the unary answer's ids.
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import orjson
import pytest
from pydantic import ValidationError

from agentbake.scripted import Fault, Reply
from tests.scripted import vllm_models as vm

USER = [{"role": "user", "content": "hi"}]
CAPTURE = {"logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True, "return_token_ids": True}
CALLS = [("Bash", {"command": "ls -la"}), ("Write", {"file_path": "a.txt", "content": "é\n"})]

# (name, Reply, request fields beyond model/messages)
VARIANTS: list[tuple[str, Reply, dict[str, Any]]] = [
    ("default", Reply(), {}),
    ("capture", Reply(), CAPTURE),
    ("text-tokens", Reply(text="two words"), {"logprobs": True, "top_logprobs": 3}),
    ("ids-only", Reply(), {"return_token_ids": True}),
    ("all-alternatives", Reply(text="x"), {**CAPTURE, "top_logprobs": -1}),
    ("no-alternatives", Reply(text="x"), {**CAPTURE, "top_logprobs": 0}),
    ("tools", Reply(text="Two calls.", reasoning="plan it", tool_calls=CALLS), CAPTURE),
    ("tools-plain", Reply(text="", tool_calls=CALLS), {}),
    ("legacy-reasoning", Reply(reasoning="hm", reasoning_field="reasoning_content"), CAPTURE),
    ("reasoning-parser", Reply(reasoning="hm hm", reasoning_parser=True), CAPTURE),
    ("reasoning-hidden", Reply(reasoning="secret", reasoning_parser=True), {**CAPTURE, "include_reasoning": False}),
    ("multi-token-steps", Reply(text="a b c d e f g", step_tokens=3), CAPTURE),
    ("minus-inf", Reply(text="a b c", logprob_values={1: -math.inf}), CAPTURE),
    ("fallback", Reply(text="a b c", fallback_entries=[0, 2]), CAPTURE),
    ("length", Reply(text="a b", finish_reason="length"), CAPTURE),
    ("abort", Reply(text="a b", finish_reason="abort"), CAPTURE),
    ("repetition", Reply(text="a a a", finish_reason="repetition"), CAPTURE),
    ("stop-string", Reply(text="x", matched_stop="END"), {**CAPTURE, "stop": ["END"]}),
    ("stop-token", Reply(text="x", matched_stop=151643), CAPTURE),
    ("unknown-fields", Reply(), {**CAPTURE, "store": False, "chat_template_kwargs": {"x": 1}, "frobnicate": 7}),
]
STREAM_ONLY = [
    ("nan", Reply(text="a b c", logprob_values={1: math.nan}), CAPTURE),
    ("keep-alive", Reply(text="a b", keep_alive=True), CAPTURE),
]
USAGE_OPTIONS = {
    "none": None,
    "include": {"include_usage": True},
    "continuous": {"include_usage": True, "continuous_usage_stats": True},
}


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=10)


def _frames(url: str, body: dict[str, Any]) -> tuple[list[bytes], list[str]]:
    """(data payloads, comment lines) of an SSE answer."""
    data, comments = [], []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=10) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith("data: "):
                data.append(line[6:].encode())
            elif line.startswith(":"):
                comments.append(line)
            else:
                assert line == "", f"not SSE: {line!r}"
    return data, comments


def _check_entries(entries: list[dict], ids: list[int], request: dict, reply: Reply) -> None:
    assert len(entries) == len(ids)
    for position, (entry, token_id) in enumerate(zip(entries, ids, strict=True)):
        if request.get("return_tokens_as_token_ids"):
            assert entry["token"] == f"token_id:{token_id}"
        if position in reply.fallback_entries:
            assert entry.get("logprob", -9999.0) == -9999.0 and not entry.get("top_logprobs")
            continue
        tops = entry["top_logprobs"]
        wanted = request.get("top_logprobs") or 0
        assert len(tops) == wanted if wanted >= 0 else len(tops) > 2
        if tops:  # the sampled token first, with the entry's own logprob; alternatives by rank
            assert tops[0]["token"] == entry["token"] and tops[0]["logprob"] == entry["logprob"]
            assert tops[0]["bytes"] == list(entry["token"].encode())
            assert [t["logprob"] for t in tops[1:]] == sorted((t["logprob"] for t in tops[1:]), reverse=True)
        value = reply.logprob_values.get(position)
        if value is not None and math.isinf(value):
            assert entry["logprob"] == -9999.0
        elif value is not None and math.isnan(value):
            assert entry["logprob"] is None  # NaN: null in a stream


@pytest.mark.parametrize(("name", "reply", "fields"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_unary_answers_match_vllm(scripted, name: str, reply: Reply, fields: dict[str, Any]):
    scripted.model.script = [reply]
    request = {"model": "m", "messages": USER, **fields}
    response = _post(scripted.url, request)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    answer = vm.ChatCompletion.model_validate_json(response.content)
    body = response.json()
    assert vm.in_field_order(vm.ChatCompletion, body) and vm.in_field_order(vm.Choice, body["choices"][0])
    assert vm.in_field_order(type(answer.choices[0].message), body["choices"][0]["message"])
    (choice,) = body["choices"]
    emitted = scripted.model.emitted[0]
    hidden = fields.get("include_reasoning") is False
    assert choice["token_ids"] == (emitted if fields.get("return_token_ids") and not hidden else None)
    assert (body["prompt_token_ids"] is not None) == bool(fields.get("return_token_ids"))
    assert answer.usage.completion_tokens == len(emitted)
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + len(emitted)
    if fields.get("logprobs") and not hidden:
        _check_entries(choice["logprobs"]["content"], emitted, request, reply)
    else:
        assert choice["logprobs"] is None
    if reply.tool_calls:
        calls = choice["message"]["tool_calls"]
        assert [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in calls] == reply.tool_calls
        assert all(c["id"].startswith("chatcmpl-tool-") for c in calls) and choice["finish_reason"] == "tool_calls"


def _stream_cases() -> list[tuple[str, Reply, dict[str, Any], str]]:
    return [(n, r, f, u) for n, r, f in VARIANTS + STREAM_ONLY for u in USAGE_OPTIONS]


@pytest.mark.parametrize(
    ("name", "reply", "fields", "usage"), _stream_cases(), ids=[f"{c[0]}-{c[3]}" for c in _stream_cases()]
)
def test_streamed_answers_match_vllm(scripted, name: str, reply: Reply, fields: dict[str, Any], usage: str):
    scripted.model.script = [reply]
    request = {"model": "m", "messages": USER, **fields, "stream": True}
    if USAGE_OPTIONS[usage] is not None:
        request["stream_options"] = USAGE_OPTIONS[usage]
    data, comments = _frames(scripted.url, request)
    assert data[-1] == b"[DONE]"
    raw = data[:-1]
    assert bool(comments) == reply.keep_alive and set(comments) <= {": keep-alive"}
    chunks = [orjson.loads(r) for r in raw]

    first = vm.RoleChunk.model_validate_json(raw[0])
    assert vm.in_field_order(vm.RoleChunk, chunks[0])
    include_usage = usage != "none"
    body_chunks = raw[1:-1] if include_usage else raw[1:]
    if include_usage:
        final = vm.UsageChunk.model_validate_json(raw[-1])
    *content, finish = [orjson.loads(r) for r in body_chunks]
    for chunk_raw, chunk in zip(body_chunks[:-1], content, strict=True):
        vm.ContentChunk.model_validate_json(chunk_raw)
        assert vm.in_field_order(vm.ContentChunk, chunk) and vm.in_field_order(vm.ContentChoice, chunk["choices"][0])
    vm.FinishChunk.model_validate_json(body_chunks[-1])
    assert vm.in_field_order(vm.FinishChunk, finish) and vm.in_field_order(vm.FinishChoice, finish["choices"][0])
    assert ("system_fingerprint" in finish) != include_usage
    assert all(("usage" in c) == (usage == "continuous") for c in chunks[:-1] if c["choices"])

    emitted = scripted.model.emitted[0]
    hidden = fields.get("include_reasoning") is False
    choices = [c["choices"][0] for c in [*content, finish]]
    assert (first.prompt_token_ids is not None) == bool(fields.get("return_token_ids"))
    assert all("prompt_token_ids" not in c for c in chunks[1:])  # only on the first chunk
    if fields.get("return_token_ids") and not hidden:
        assert [i for c in choices for i in c["token_ids"]] == emitted
        assert all(c["token_ids"] or c is choices[-1] for c in choices)  # every chunk carries tokens
    else:
        assert all(c["token_ids"] is None for c in choices)
    if fields.get("logprobs") and not hidden:
        _check_entries([e for c in choices for e in c["logprobs"]["content"]], emitted, request, reply)
        if fields.get("return_token_ids"):
            assert all(len(c["logprobs"]["content"]) == len(c["token_ids"]) for c in choices)
    else:
        assert all(c["logprobs"] is None for c in choices)
    if fields.get("logprobs") or fields.get("return_token_ids"):  # steps the parser kept back still come
        assert any(c["delta"] == {} for c in choices[:-1]) == bool(reply.reasoning or reply.tool_calls) or hidden
    else:
        assert all(c["delta"] != {} for c in choices[:-1])
    if include_usage:
        assert final.usage.completion_tokens == len(emitted)
    if usage == "continuous":
        running = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
        assert running == sorted(running) and running[0] == 0 and running[-1] == len(emitted)

    text = "".join(c["delta"].get("content") or "" for c in choices)
    thought = "".join(c["delta"].get(reply.reasoning_field) or "" for c in choices)
    assert text == reply.text and thought == ("" if hidden else reply.reasoning)
    arguments: dict[int, str] = {}
    for c in choices:
        for call in c["delta"].get("tool_calls", []):
            arguments[call["index"]] = arguments.get(call["index"], "") + call["function"].get("arguments", "")
    assert [orjson.loads(a) for a in arguments.values()] == [args for _, args in reply.tool_calls]


def test_stream_and_unary_answers_of_one_request_agree(scripted):
    reply = Reply(text="same answer", reasoning="r", tool_calls=CALLS)
    scripted.model.script = [reply, reply]
    request = {"model": "m", "messages": USER, **CAPTURE}
    unary = _post(scripted.url, request).json()
    data, _ = _frames(scripted.url, {**request, "stream": True})
    chunks = [orjson.loads(d) for d in data[:-1]]
    choices = [c["choices"][0] for c in chunks[1:]]
    assert [i for c in choices for i in c["token_ids"]] == unary["choices"][0]["token_ids"]
    assert [e for c in choices for e in c["logprobs"]["content"]] == unary["choices"][0]["logprobs"]["content"]
    assert chunks[0]["prompt_token_ids"] == unary["prompt_token_ids"] and chunks[0]["id"] == unary["id"]
    streamed_ids = [t["id"] for c in choices for t in c["delta"].get("tool_calls", []) if "id" in t]
    assert streamed_ids == [t["id"] for t in unary["choices"][0]["message"]["tool_calls"]]


def test_nan_in_a_unary_answer_is_a_400_as_vllm_serializes_it(scripted):
    scripted.model.script = [Reply(text="a b", logprob_values={0: math.nan})]
    response = _post(scripted.url, {"model": "m", "messages": USER, **CAPTURE})
    assert response.status_code == 400
    error = vm.ErrorEnvelope.model_validate_json(response.content).error
    assert error.type == "BadRequestError" and "Out of range float values" in error.message


def test_an_error_mid_stream_is_one_error_event_then_done(scripted):
    scripted.model.script = [Reply(text="one two three", error_after=1)]
    data, _ = _frames(scripted.url, {"model": "m", "messages": USER, **CAPTURE, "stream": True})
    assert data[-1] == b"[DONE]"
    error = vm.ErrorEnvelope.model_validate_json(data[-2]).error
    assert (error.type, error.code, error.param) == ("InternalServerError", 500, None)
    vm.RoleChunk.model_validate_json(data[0])
    (one,) = [orjson.loads(d) for d in data[1:-2]]
    assert one["choices"][0]["token_ids"] == scripted.model.emitted[0][:1]


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (Fault(status=400, message="too long", param="messages"), "BadRequestError"),
        (Fault(status=404, message="The model `x` does not exist."), "NotFoundError"),
        (Fault(status=503, message="busy"), "Service Unavailable"),
        (Fault(status=529, message="overloaded"), "Error"),
    ],
)
def test_faults_use_the_error_envelope(scripted, fault: Fault, kind: str):
    scripted.model.script = [fault]
    response = _post(scripted.url, {"model": "m", "messages": USER})
    assert response.status_code == fault.status
    error = vm.ErrorEnvelope.model_validate_json(response.content).error
    assert (error.message, error.type, error.param, error.code) == (fault.message, kind, fault.param, fault.status)


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"stream_options": {"include_usage": True}}, "stream_options", "Stream options can only be defined when"),
        ({"top_logprobs": 2}, "top_logprobs", "`logprobs` must be set to true"),
        ({"logprobs": True, "top_logprobs": -3}, "top_logprobs", "must be a positive value or -1"),
    ],
)
def test_vllm_request_checks_answer_400_bad_request(scripted, fields: dict, param: str, message: str):
    response = _post(scripted.url, {"model": "m", "messages": USER, **fields})
    assert response.status_code == 400
    error = vm.ErrorEnvelope.model_validate_json(response.content).error
    assert error.type == "BadRequestError" and error.param == param and message in error.message
    assert scripted.model.emitted == []


def test_models_and_tokenize_match_vllm(scripted):
    models = vm.ModelList.model_validate_json(httpx.get(scripted.url + "/v1/models").content)
    assert [m.id for m in models.data] == ["scripted"]
    chat = {"model": "m", "messages": USER}
    tokens = vm.TokenizeResponse.model_validate_json(httpx.post(scripted.url + "/tokenize", json=chat).content)
    scripted.model.script = [Reply()]
    answer = _post(scripted.url, {**chat, "return_token_ids": True}).json()
    assert tokens.tokens == answer["prompt_token_ids"] and tokens.count == len(tokens.tokens)
    assert tokens.count == answer["usage"]["prompt_tokens"] and tokens.token_strs is None
    prompt = vm.TokenizeResponse.model_validate_json(
        httpx.post(scripted.url + "/tokenize", json={"prompt": "a b c", "return_token_strs": True}).content
    )
    assert prompt.count == 3 and len(prompt.token_strs) == 3


def test_the_contract_models_are_strict():
    """They catch drift: an extra key, a missing key, a wrong type."""
    good = {"token": "token_id:1", "logprob": -0.5, "bytes": [1], "top_logprobs": []}
    vm.LogprobEntry.model_validate(good)
    for bad in ({**good, "extra": 1}, {k: v for k, v in good.items() if k != "bytes"}, {**good, "logprob": "x"}):
        with pytest.raises(ValidationError):
            vm.LogprobEntry.model_validate(bad)
    with pytest.raises(ValidationError):  # vLLM omits an empty tool_calls list
        vm.Delta.model_validate({"tool_calls": []})
