"""The gateway in the configurations and failures a first run meets: the default settings (no `--trace`),
its own bugs (unary and mid-stream), an https upstream, and a failing `/tokenize`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import anthropic
import httpx
import openai
import orjson
import pytest

from agentbake.gateway import app as gateway_app
from agentbake.scripted import Reply
from agentbake.serve import serve_in_thread

USER = [{"role": "user", "content": "hi"}]


def claude(gw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="client-secret", max_retries=0)


def oai(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="client-secret", max_retries=0)


def fail_on_call(n: int, real: Callable) -> Callable:
    """`real`, except that its n-th call (counting from 1) raises: a bug inside the gateway."""
    calls = 0

    def wrapper(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == n:
            raise RuntimeError("injected gateway bug")
        return real(*args, **kwargs)

    return wrapper


# ------------------------------------------------------------------ the default configuration


def test_default_configuration_captures_upstream_fields_and_writes_no_trace(upstream, tmp_path):
    """`agentbake gateway --upstream URL`, nothing else (here on a unix socket, the one free address a test
    can wait for): both dialects answer, the capture fields still go upstream, no file is written."""
    socket = tmp_path / "gw.sock"
    env = {**os.environ, "AGENTBAKE_UPSTREAM_API_KEY": "sk-default"}
    command = [sys.executable, "-m", "agentbake.gateway", "--upstream", upstream.url + "/v1", "--uds", str(socket)]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE)
    try:
        http = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://localhost")
        deadline = time.monotonic() + 20
        while True:  # the socket file exists from bind(), a moment before listen(): wait for an answer
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the gateway did not start"
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.02)
        chat = http.post("/v1/chat/completions", json={"model": "m", "messages": USER}).json()
        assert chat["choices"][0]["message"]["content"] == "Hello from the scripted model."
        assert "logprobs" not in chat["choices"][0]  # injected, so stripped from the client's copy
        with http.stream(
            "POST", "/v1/messages", json={"model": "c", "max_tokens": 9, "messages": USER, "stream": True}
        ) as r:
            assert r.status_code == 200 and "event: message_stop" in r.read().decode()
    finally:
        process.terminate()
        process.wait(10)
    assert process.returncode in (0, -15)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no trace file, and the socket is removed
    for request in upstream.fake.requests:
        assert request["logprobs"] is True and request["return_token_ids"] is True
    assert {h["authorization"] for h in upstream.fake.headers} == {"Bearer sk-default"}
    assert len(upstream.fake.requests) == 2


# ------------------------------------------------------------------ the gateway's own bugs


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_an_unexpected_exception_is_a_500_and_a_record(gateway, upstream, monkeypatch, dialect):
    if dialect == "anthropic":
        monkeypatch.setattr(gateway_app, "openai_to_anthropic", fail_on_call(1, gateway_app.openai_to_anthropic))
        body = {"model": "c", "max_tokens": 9, "messages": USER}
        answer = httpx.post(gateway.url + "/v1/messages", json=body)
        assert answer.json()["error"]["type"] == "api_error"
    else:
        monkeypatch.setattr(gateway_app, "strip_injected", fail_on_call(1, gateway_app.strip_injected))
        answer = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m", "messages": USER})
    assert answer.status_code == 500
    assert "gateway error: RuntimeError('injected gateway bug')" in answer.text
    (record,) = gateway.records()
    assert record.upstream_status == 200
    assert record.upstream_error == "gateway error: RuntimeError('injected gateway bug')"
    assert record.completion_token_ids == upstream.fake.emitted[0]  # what the upstream sent is kept
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0]


def test_a_gateway_fault_mid_stream_ends_with_an_error_event_and_a_record(gateway, upstream, monkeypatch):
    upstream.fake.script = [Reply(text="one two three four five")]
    feed = fail_on_call(4, gateway_app.StreamTranslator.feed)  # the role chunk, then two tokens, then the bug
    monkeypatch.setattr(gateway_app.StreamTranslator, "feed", feed)
    with (
        pytest.raises(anthropic.APIStatusError, match="gateway error while relaying the stream: RuntimeError"),
        claude(gateway).messages.stream(model="c", max_tokens=100, messages=USER) as stream,
    ):
        stream.get_final_message()
    (record,) = gateway.records()
    assert record.upstream_error.startswith("gateway error while relaying the stream: RuntimeError")
    assert record.completion_token_ids == upstream.fake.emitted[0][:3]  # the chunks decoded before the bug
    assert record.per_token_logps == upstream.fake.emitted_logprobs[0][:3]


def test_a_gateway_fault_mid_stream_reaches_an_openai_client_as_an_error(gateway, upstream, monkeypatch):
    upstream.fake.script = [Reply(text="one two three four five")]
    monkeypatch.setattr(gateway_app, "strip_injected", fail_on_call(3, gateway_app.strip_injected))
    stream = oai(gateway).chat.completions.create(model="m", messages=USER, stream=True)
    with pytest.raises(openai.APIError, match="gateway error while relaying the stream"):
        list(stream)
    (record,) = gateway.records()
    assert record.upstream_error.startswith("gateway error while relaying the stream: RuntimeError")
    assert record.completion_token_ids == upstream.fake.emitted[0][:2]


# ------------------------------------------------------------------ an https upstream


def test_an_https_upstream_is_trusted_through_upstream_ca_file(make_gateway, tls_upstream, tls_files):
    model, url = tls_upstream
    assert url.startswith("https://")
    gw = make_gateway(upstream=url, upstream_ca_file=tls_files.ca)
    assert oai(gw).chat.completions.create(model="m", messages=USER).choices[0].message.content
    with claude(gw).messages.stream(model="c", max_tokens=50, messages=USER) as stream:
        assert stream.get_final_text() == "Hello from the scripted model."
    records = gw.records()
    assert [r.completion_token_ids for r in records] == model.emitted
    assert [r.per_token_logps for r in records] == model.emitted_logprobs

    untrusting = make_gateway(upstream=url)  # the system store does not know the test's CA
    with pytest.raises(openai.APIStatusError, match="CERTIFICATE_VERIFY_FAILED") as caught:
        oai(untrusting).chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code in (502, 503, 529)
    assert len(model.requests) == 2  # it never reached the server


# ------------------------------------------------------------------ count_tokens when /tokenize fails


class BrokenTokenizer:
    """A `/tokenize` that fails: each call answers the next (status, body) of `answers`."""

    def __init__(self, answers: list[tuple[int, bytes]]) -> None:
        self.answers = answers
        self.calls = 0

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return
        status, body = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})


def test_count_tokens_estimates_when_tokenize_fails_and_keeps_asking(make_gateway, upstream):
    vllm_error = orjson.dumps({"error": {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}})
    tokenizer = BrokenTokenizer([(500, vllm_error), (200, b"{not json"), (200, b'{"count": "many"}'), (503, b"")])
    messages = [{"role": "user", "content": "x" * 400}]
    with serve_in_thread(tokenizer, log_level="critical") as served:
        gw = make_gateway(tokenize_url=served.url + "/tokenize")
        counts = [claude(gw).messages.count_tokens(model="c", messages=messages).input_tokens for _ in range(4)]
    assert tokenizer.calls == 4  # a failure is not a 404: the gateway asks again next time
    assert len(set(counts)) == 1 and 100 <= counts[0] <= 120  # ~4 bytes of JSON per token
    assert upstream.fake.tokenized == [] and gw.records() == []

    unreachable = make_gateway(tokenize_url="http://127.0.0.1:9/tokenize")  # the discard port: refused
    assert claude(unreachable).messages.count_tokens(model="c", messages=messages).input_tokens == counts[0]
