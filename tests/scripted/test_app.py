"""The scripted model's app: determinism, the scripting API's faults and variants, its other routes."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from agentbake.scripted import Fault, Reply, solution_steps

USER = [{"role": "user", "content": "hi"}]
CAPTURE = {"logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True, "return_token_ids": True}


def _chat(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": USER, **body}, timeout=10)


def test_the_same_request_gets_the_same_bytes_and_another_request_other_logprobs(scripted):
    first, again = _chat(scripted.url, **CAPTURE), _chat(scripted.url, **CAPTURE)
    assert first.content == again.content
    other = httpx.post(
        scripted.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hello"}], **CAPTURE},
    ).json()
    same_text = first.json()["choices"][0]
    assert other["choices"][0]["token_ids"] == same_text["token_ids"]  # the same text: the same ids
    logprobs = [[e["logprob"] for e in c["logprobs"]["content"]] for c in (same_text, other["choices"][0])]
    assert logprobs[0] != logprobs[1] and other["id"] != first.json()["id"]


def test_the_official_sdk_reads_stream_and_unary_answers(scripted):
    client = scripted.client()
    scripted.model.script = [Reply(text="a b", keep_alive=True), Reply(text="a b")]
    chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True, extra_body=CAPTURE))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "a b"
    completion = client.chat.completions.create(model="m", messages=USER, logprobs=True, extra_body=CAPTURE)
    assert completion.choices[0].message.content == "a b" and completion.choices[0].finish_reason == "stop"
    assert scripted.model.emitted[0] == scripted.model.emitted[1] and len(scripted.model.emitted[0]) == 3


def test_script_then_responder_and_the_call_log(scripted):
    scripted.model.script = [Reply(text="scripted")]
    scripted.model.responder = lambda request: Reply(text=f"echo {request['messages'][-1]['content']}")
    texts = [_chat(scripted.url, extra_field=1).json()["choices"][0]["message"]["content"] for _ in range(2)]
    assert texts == ["scripted", "echo hi"]
    assert scripted.model.paths == ["/v1/chat/completions"] * 2 and scripted.model.requests[0]["extra_field"] == 1
    assert len(scripted.model.emitted) == 2 and "content-type" in scripted.model.headers[0]


def test_tool_call_ids_can_be_scripted_and_the_request_id_header_names_the_answer(scripted):
    scripted.model.script = [Reply(tool_calls=[("Bash", {"command": "ls"})], tool_call_ids=["call_0"])]
    response = httpx.post(
        scripted.url + "/v1/chat/completions",
        json={"model": "m", "messages": USER},
        headers={"x-request-id": "abc"},
    ).json()
    assert response["id"] == "chatcmpl-abc" and response["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0"


def test_key_id_form_adds_a_token_id_key(scripted):
    scripted.model.script = [Reply(text="a b", id_form="key")]
    entries = _chat(scripted.url, **CAPTURE).json()["choices"][0]["logprobs"]["content"]
    assert [e["token_id"] for e in entries] == scripted.model.emitted[0]


def test_flat_fault_rejected_fields_custom_body_and_headers(scripted):
    scripted.model.script = [
        Fault(status=400, message="old style", flat=True),
        Fault(status=429, headers={"retry-after": "3"}),
        Fault(status=200, body={"not": "a completion"}),
    ]
    flat = _chat(scripted.url).json()
    assert flat == {"object": "error", "message": "old style", "type": "BadRequestError", "param": None, "code": 400}
    limited = _chat(scripted.url)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "3"
    assert _chat(scripted.url).json() == {"not": "a completion"}
    scripted.model.reject_fields = {"return_token_ids"}
    rejected = _chat(scripted.url, return_token_ids=True)
    assert rejected.status_code == 400 and "Extra inputs are not permitted: return_token_ids" in rejected.text


def test_stream_faults_reset_garbage_omit_finish_and_ignore_stream(scripted):
    body = {"model": "m", "messages": USER, "stream": True, **CAPTURE}
    scripted.model.script = [Reply(text="one two three", reset_after=2)]
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", scripted.url + "/v1/chat/completions", json=body) as r,
    ):
        list(r.iter_lines())

    scripted.model.script = [Reply(text="a b", garbage=True), Reply(text="a b", omit_finish=True)]
    garbage = httpx.post(scripted.url + "/v1/chat/completions", json=body).text
    assert "data: {this is not json" in garbage and garbage.endswith("data: [DONE]\n\n")
    cut = httpx.post(scripted.url + "/v1/chat/completions", json=body).text
    chunks = [orjson.loads(line[6:]) for line in cut.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in cut and all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert [i for c in chunks[1:] for i in c["choices"][0]["token_ids"]] == scripted.model.emitted[-1]

    scripted.model.script = [Reply(text="whole", ignore_stream=True)]
    whole = httpx.post(scripted.url + "/v1/chat/completions", json=body)
    assert whole.headers["content-type"] == "application/json" and whole.json()["object"] == "chat.completion"


def test_health_unknown_routes_and_bad_bodies(scripted):
    assert httpx.get(scripted.url + "/health").status_code == 200
    assert httpx.get(scripted.url + "/nope").status_code == 404
    bad = httpx.post(scripted.url + "/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "Bad Request"
    missing = httpx.post(scripted.url + "/v1/chat/completions", json={"model": "m"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "body.messages"
    scripted.model.tokenize_supported = False
    assert httpx.post(scripted.url + "/tokenize", json={"prompt": "x"}).status_code == 404
    with pytest.raises(openai.BadRequestError):
        scripted.client().chat.completions.create(model="m", messages=USER, top_logprobs=2)


def test_the_readme_example_runs(capsys, monkeypatch):
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "agentbake" / "scripted" / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(repo)
    exec(compile(example, "README.md", "exec"), {})
    arguments, token_ids = capsys.readouterr().out.splitlines()
    solve = (repo / "examples" / "tasks" / "write-file" / "solution" / "solve.sh").read_text()
    assert json.loads(arguments) == {"command": solution_steps(solve)[0]}
    assert token_ids.startswith("[") and token_ids.endswith(", 151645]")


@pytest.mark.parametrize("drop_reasoning", [False, True], ids=["sent-back-unchanged", "reasoning-dropped"])
def test_prompt_ids_extend_the_previous_turn_when_the_answer_is_sent_back_unchanged(scripted, drop_reasoning):
    """What a trainer concatenating turns needs; a client that drops reasoning breaks it, as with real templates."""
    reply = Reply(text="Listing.", reasoning="think first", tool_calls=[("bash", {"command": "ls -la"})])
    scripted.model.script = [reply, Reply(text="done")]
    first = _chat(scripted.url, **CAPTURE).json()
    message = first["choices"][0]["message"]
    sent_back = {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]}
    if not drop_reasoning:
        sent_back["reasoning"] = message["reasoning"]
    tool = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "a.txt"}
    second = httpx.post(
        scripted.url + "/v1/chat/completions",
        json={"model": "m", "messages": [*USER, sent_back, tool], **CAPTURE},
    ).json()
    before = first["prompt_token_ids"] + first["choices"][0]["token_ids"]
    assert (second["prompt_token_ids"][: len(before)] == before) != drop_reasoning


def test_tokenize_counts_with_the_model_s_prompt_renderer(scripted):
    scripted.model.render_prompt = lambda request: [7] * (3 * len(request["messages"]))
    counted = httpx.post(scripted.url + "/tokenize", json={"model": "m", "messages": USER}).json()
    answered = _chat(scripted.url, return_token_ids=True).json()
    assert counted["tokens"] == answered["prompt_token_ids"] == [7, 7, 7] and counted["count"] == 3


def _first_logprobs(url: str, temperature: float) -> list[float]:
    choice = _chat(url, temperature=temperature, **CAPTURE).json()["choices"][0]
    return [entry["logprob"] for entry in choice["logprobs"]["content"]]


def test_raw_logprobs_ignore_temperature_and_processed_ones_follow_it(scripted):
    assert scripted.model.logprobs_mode == "raw"
    assert _first_logprobs(scripted.url, 0.5) == _first_logprobs(scripted.url, 1.5)
    raw = _first_logprobs(scripted.url, 1.0)
    scripted.model.logprobs_mode = "processed"  # the fixture resets it for the next test
    cooler, warmer = _first_logprobs(scripted.url, 0.5), _first_logprobs(scripted.url, 1.5)
    assert cooler != warmer
    assert cooler == [round(value / 0.5, 6) for value in raw]
