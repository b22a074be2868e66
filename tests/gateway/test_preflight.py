"""Preflight against the scripted model in its variants: full vLLM, no logprobs, rejected or ignored
vLLM-only fields, no prompt ids, an https upstream; the CLI and the gateway's `--preflight`."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.errors import PreflightError
from agentbake.gateway import GatewayConfig, create_app
from agentbake.gateway.preflight import run_preflight
from agentbake.gateway.preflight_probes import PROMPT, SAMPLING_TEMPERATURES, SAMPLING_TOP_LOGPROBS
from agentbake.scripted import Reply

from .conftest import CALLS_PING, TLSFiles, details, statuses


def test_full_vllm_is_capturable_and_the_calls_are_the_gateways(serve_model):
    model, url = serve_model()
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "capturable", report.summary()
    assert set(statuses(report).values()) == {"ok"}
    assert report.model == "scripted"  # from /v1/models
    assert report.missing == [] and report.rejected_fields == []
    token_ids = next(c for c in report.checks if c.name == "token_ids")
    assert "`token_id:<n>` tokens" in token_ids.detail and "`token_ids`" in token_ids.detail
    unary, stream, cool, hot = model.requests
    assert [unary.get("stream"), stream["stream"], cool["stream"], hot["stream"]] == [False, True, False, False]
    for request in model.requests:  # sent as the gateway sends its calls, with a tiny tool offered
        assert request["logprobs"] is True and request["return_token_ids"] is True
        assert request["return_tokens_as_token_ids"] is True
        assert request["tools"][0]["function"]["name"] == "ping"
        assert request["messages"] == [{"role": "user", "content": PROMPT}]
    assert stream["stream_options"] == {"include_usage": True}
    # The sampling probes: the same prompt at two temperatures, with alternatives to compare.
    assert [unary["temperature"], cool["temperature"], hot["temperature"]] == [0, *SAMPLING_TEMPERATURES]
    assert [unary["top_logprobs"], cool["top_logprobs"]] == [1, SAMPLING_TOP_LOGPROBS]
    assert report.logprobs_mode == "raw"
    assert details(report)["logprobs_mode"].startswith("raw (the policy's, before temperature): ")


def test_a_model_that_does_not_call_the_tool_is_a_warning_only(serve_model):
    _, url = serve_model(reply=Reply(text="pong"))
    report = run_preflight(GatewayConfig(upstream=url, model_override="m"))
    assert report.verdict == "capturable"
    assert statuses(report)["tool_calls"] == "warn"
    assert report.model == "m"


def test_a_server_without_logprobs_is_not_capturable_and_says_so(serve_model):
    _, url = serve_model(ignore={"logprobs", "top_logprobs"})
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "not capturable" and not report.ok
    assert statuses(report)["logprobs"] == "missing"
    assert statuses(report)["token_ids"] == "ok"  # `token_ids` still came
    assert any("no logprobs in the unary and the streaming answer" in m for m in report.missing)

    with pytest.raises(PreflightError, match=r"will not start.*no logprobs") as caught:
        create_app(GatewayConfig(upstream=url, preflight=True))
    assert caught.value.report.verdict == "not capturable"


def test_a_server_rejecting_return_token_ids_is_partial_and_named(serve_model):
    model, url = serve_model()
    model.reject_fields = {"return_token_ids"}
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "partial", report.summary()
    assert report.rejected_fields == ["return_token_ids"]
    assert statuses(report) == {
        "answers": "ok",
        "logprobs": "ok",
        "token_ids": "ok",  # from the `token_id:<n>` strings
        "records": "ok",
        "prompt_ids": "partial",
        "tool_calls": "ok",
        "rejected_fields": "warn",
        "logprobs_mode": "ok",
    }
    # The first call was refused with a 400 and sent again without the field, as the gateway does; the
    # sampling probes learn it the same way.
    assert ["return_token_ids" in r for r in model.requests] == [True, False, False, True, False, False]


def test_a_null_logprob_makes_the_records_partial(serve_model):
    """vLLM streams a NaN logprob as `null` (and answers a unary one with a 400): the record says so."""
    model, url = serve_model()
    model.responder = lambda request: (
        Reply(text="a b c", logprob_values={1: math.nan}) if request["stream"] else CALLS_PING
    )
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "partial", report.summary()
    records = next(c for c in report.checks if c.name == "records")
    assert records.status == "partial"
    tokens = len(model.emitted[1])  # the streamed call's
    assert records.detail == f"the gateway's records would be stream: partial (null logprobs: 1 of {tokens})"


def test_a_server_rejecting_both_vllm_fields_has_no_ids(serve_model):
    model, url = serve_model()
    model.reject_fields = {"return_token_ids", "return_tokens_as_token_ids"}
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "not capturable"
    assert report.rejected_fields == ["return_token_ids", "return_tokens_as_token_ids"]
    assert any("no completion token ids" in m for m in report.missing)


def test_a_server_without_prompt_ids_is_partial_and_key_form_ids_count(serve_model):
    _, url = serve_model(ignore={"return_token_ids", "return_tokens_as_token_ids"}, reply=CALLS_PING)
    report = run_preflight(GatewayConfig(upstream=url))
    # No `token_ids` and text tokens: nothing names the sampled ids.
    assert statuses(report)["token_ids"] == "missing"

    keyed = Reply(text="", tool_calls=[("ping", {})], id_form="key")
    _, url = serve_model(ignore={"return_token_ids"}, reply=keyed)
    report = run_preflight(GatewayConfig(upstream=url, tokens_as_token_ids=False))
    assert report.verdict == "partial", report.summary()
    assert statuses(report)["prompt_ids"] == "partial"
    assert next(c for c in report.checks if c.name == "token_ids").detail == "as `token_id` keys"


def test_an_https_upstream_with_its_ca_file_or_ssl_cert_file(serve_model, tls_files: TLSFiles, monkeypatch):
    _, url = serve_model(tls=(tls_files.cert, tls_files.key))
    assert url.startswith("https://127.0.0.1:")
    report = run_preflight(GatewayConfig(upstream=url, upstream_ca_file=tls_files.ca))
    assert report.verdict == "capturable", report.summary()

    with pytest.raises(PreflightError, match=r"cannot list the upstream's models: .*CERTIFICATE_VERIFY_FAILED"):
        run_preflight(GatewayConfig(upstream=url))  # the system store does not know the test CA
    report = run_preflight(GatewayConfig(upstream=url, model_override="m"))
    assert "CERTIFICATE_VERIFY_FAILED" in report.missing[0] and report.verdict == "not capturable"

    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca))  # OpenSSL's own override of the system store
    assert run_preflight(GatewayConfig(upstream=url)).verdict == "capturable"


def test_cli_reads_the_key_from_env_or_file_and_prints_json(serve_model, tmp_path):
    model, url = serve_model()
    runner = CliRunner()
    result = runner.invoke(
        main, ["preflight", "--upstream", url, "--json"], env={"AGENTBAKE_UPSTREAM_API_KEY": "sk-env-123"}
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["verdict"] == "capturable" and data["ok"] is True
    assert [c["name"] for c in data["checks"]][:3] == ["answers", "logprobs", "token_ids"]
    chat_headers = [h for h, p in zip(model.headers, model.paths, strict=True) if p.endswith("/chat/completions")]
    assert {h["authorization"] for h in chat_headers} == {"Bearer sk-env-123"}

    key_file = tmp_path / "key"
    key_file.write_text("sk-file-456\n")
    result = runner.invoke(main, ["preflight", "--upstream", url, "--model", "m", "--api-key-file", str(key_file)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("(model m): capturable")
    assert model.headers[-1]["authorization"] == "Bearer sk-file-456"


def test_cli_exits_1_naming_what_is_missing(serve_model):
    _, url = serve_model(ignore={"logprobs", "top_logprobs"})
    result = CliRunner().invoke(main, ["preflight", "--upstream", url])
    assert result.exit_code == 1
    assert "not capturable" in result.output and "missing logprobs: no logprobs" in result.output


def test_gateway_preflight_flag_refuses_to_start_or_starts(serve_model):
    _, url = serve_model(ignore={"logprobs", "top_logprobs"})
    result = CliRunner().invoke(main, ["gateway", "--upstream", url, "--preflight", "--port", "0"])
    assert result.exit_code == 1
    assert "preflight failed, the gateway will not start" in result.output
    assert "the server ignores `logprobs: true`" in result.output

    model, url = serve_model()
    gateway = create_app(GatewayConfig(upstream=url, preflight=True))
    assert len(model.requests) == 4 and gateway.config.preflight
