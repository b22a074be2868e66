"""Request rewriting, setting by setting."""

from __future__ import annotations

import pytest

from agentbake.gateway.config import GatewayConfig
from agentbake.gateway.errors import InvalidRequest
from agentbake.gateway.rewrite import rewrite_request


def rewrite(body, **settings):
    config = GatewayConfig(upstream="http://127.0.0.1:1/v1", **settings)
    injected = rewrite_request(body, config)
    return body, injected


def test_defaults_cap_tokens_and_inject_capture_fields():
    body, injected = rewrite({"model": "m", "messages": [], "max_tokens": 128000, "max_completion_tokens": 10})
    assert body["max_tokens"] == 8192 and body["max_completion_tokens"] == 10
    assert body["logprobs"] is True and body["top_logprobs"] == 1
    assert body["return_tokens_as_token_ids"] is True and body["return_token_ids"] is True
    assert injected.logprobs and injected.token_ids and not injected.usage


def test_streaming_gets_usage_and_remembers_it_was_injected():
    body, injected = rewrite({"model": "m", "stream": True, "stream_options": {"continuous_usage_stats": False}})
    assert body["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}
    assert injected.usage
    _, asked = rewrite({"model": "m", "stream": True, "stream_options": {"include_usage": True}})
    assert not asked.usage


def test_override_rename_and_thinking():
    body, _ = rewrite(
        {"model": "claude", "max_tokens": 100, "chat_template_kwargs": {"x": 1}},
        model_override="gpt-5-mini",
        disable_thinking=True,
        top_logprobs=5,
    )
    assert body["model"] == "gpt-5-mini"
    assert "max_tokens" not in body and body["max_completion_tokens"] == 100
    assert body["chat_template_kwargs"] == {"x": 1, "enable_thinking": False}
    assert body["top_logprobs"] == 5


def test_no_cap_and_no_capture():
    body, injected = rewrite(
        {"model": "m", "max_tokens": 50000},
        max_tokens_cap=None,
        capture_logprobs=False,
        request_token_ids=False,
    )
    assert body == {"model": "m", "max_tokens": 50000}
    assert not (injected.logprobs or injected.token_ids)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": []}, "model: expected a string"),
        ({"model": "m", "max_tokens": "5"}, "max_tokens: expected an integer"),
    ],
)
def test_bad_fields(body, message):
    with pytest.raises(InvalidRequest, match=message):
        rewrite(body)


def test_sampling_settings_replace_the_clients_and_unset_ones_are_forwarded():
    body, _ = rewrite({"model": "m", "temperature": 1.0, "top_p": 0.95, "top_k": 20}, temperature=0.6, top_k=0)
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.6, 0.95, 0)  # top_p: the client's
    assert "min_p" not in body and "repetition_penalty" not in body
    with pytest.raises(ValueError, match="temperature"):
        GatewayConfig(upstream="http://127.0.0.1:1/v1", temperature=0)
