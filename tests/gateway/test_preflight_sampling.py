"""Raw or processed logprobs: the preflight's sampling probes against the scripted model in both of vLLM's
`--logprobs-mode`s, servers that cannot tell or send logits, a mode that contradicts the gateway's, the
stamp on the gateway's records, and the comparison itself on hand-made answers."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.errors import PreflightError
from agentbake.gateway import GatewayConfig, create_app
from agentbake.gateway.capture import Capture
from agentbake.gateway.preflight import run_preflight
from agentbake.gateway.preflight_probes import SAMPLING_TEMPERATURES, Probe
from agentbake.gateway.preflight_sampling import compare_sampling
from agentbake.scripted import Reply
from agentbake.serve import serve_in_thread

from .conftest import details, statuses


def test_processed_logprobs_are_told_from_raw_ones(serve_model):
    model, url = serve_model()
    model.logprobs_mode = "processed"
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "capturable", report.summary()
    assert report.logprobs_mode == "processed"
    detail = details(report)["logprobs_mode"]
    assert detail.startswith("processed (after temperature): ") and "moved between temperature 0.5 and 1.5" in detail


def test_a_mode_the_server_contradicts_is_not_capturable_and_names_both_fixes(serve_model):
    model, url = serve_model()
    model.logprobs_mode = "processed"
    report = run_preflight(GatewayConfig(upstream=url, logprobs_mode="raw"))
    assert report.verdict == "not capturable" and statuses(report)["logprobs_mode"] == "missing"
    assert report.logprobs_mode == "processed"  # what the server showed, not what it was told
    (missing,) = report.missing
    assert "the logprobs are processed" in missing and "told --logprobs-mode raw" in missing
    assert "serve vLLM with --logprobs-mode raw_logprobs, or pass --logprobs-mode processed" in missing

    with pytest.raises(PreflightError, match=r"gateway will not start.*--logprobs-mode raw_logprobs"):
        create_app(GatewayConfig(upstream=url, logprobs_mode="raw", preflight=True))

    result = CliRunner().invoke(main, ["preflight", "--upstream", url, "--logprobs-mode", "raw", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert (data["verdict"], data["logprobs_mode"]) == ("not capturable", "processed")


@pytest.mark.parametrize("mode", ["raw", "processed"])
def test_the_gateways_preflight_stamps_what_it_found_on_every_record(serve_model, tmp_path, mode):
    model, url = serve_model()
    model.logprobs_mode = mode
    trace = tmp_path / "trace.jsonl"
    gateway = create_app(GatewayConfig(upstream=url, trace=trace, preflight=True))
    assert gateway.config.logprobs_mode == mode
    with serve_in_thread(gateway, log_level="critical") as served:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
        answer = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    (record,) = [json.loads(line) for line in trace.read_text().splitlines()]
    assert record["logprobs_mode"] == mode
    assert record["per_token_logps"] == model.emitted_logprobs[-1]  # the values the stamp speaks of


def test_tokens_named_by_text_are_compared_too(serve_model):
    """A server that refuses `return_tokens_as_token_ids` names the alternatives by their text only."""
    model, url = serve_model()
    model.reject_fields = {"return_tokens_as_token_ids"}
    model.logprobs_mode = "processed"
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.rejected_fields == ["return_tokens_as_token_ids"]
    assert not model.requests[-1].get("return_tokens_as_token_ids")
    assert report.logprobs_mode == "processed", report.summary()


def test_logits_are_not_logprobs(serve_model):
    _, url = serve_model(reply=Reply(text="pong", logprob_values={0: 4.25}))
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "partial" and statuses(report)["logprobs_mode"] == "partial"
    assert report.logprobs_mode is None
    assert "the server sends logits, not logprobs (values above 0 (up to 4.25)" in details(report)["logprobs_mode"]


def test_without_logprobs_the_mode_is_unknown_or_as_configured(serve_model):
    _, url = serve_model(ignore={"logprobs", "top_logprobs"})
    report = run_preflight(GatewayConfig(upstream=url, logprobs_mode="raw"))
    assert statuses(report)["logprobs_mode"] == "warn" and report.logprobs_mode == "raw"
    assert details(report)["logprobs_mode"] == (
        "cannot tell raw from processed logprobs: the answer at temperature 0.5 has no logprobs; "
        "records are stamped 'raw' as configured"
    )


def test_near_certain_tokens_alone_cannot_tell(serve_model):
    """Only the sampled token, its logprob near 0 at either temperature: no evidence, a warning."""
    certain = Reply(text="pong pong", logprob_values={0: -0.01, 1: -0.02, 2: -0.001})
    _, url = serve_model(ignore={"top_logprobs"}, reply=certain)
    report = run_preflight(GatewayConfig(upstream=url))
    assert report.verdict == "capturable" and report.logprobs_mode is None
    assert statuses(report)["logprobs_mode"] == "warn"
    assert "share no token whose logprob is below -0.5" in details(report)["logprobs_mode"]
    assert "pass --logprobs-mode raw|processed to stamp them" in details(report)["logprobs_mode"]


def test_a_server_that_moves_some_logprobs_only_is_inconsistent(serve_model):
    model, url = serve_model()
    cool = SAMPLING_TEMPERATURES[0]
    model.responder = lambda request: Reply(
        text="pong", logprob_values={0: -1.0 if request["temperature"] == cool else -3.0}
    )
    report = run_preflight(GatewayConfig(upstream=url))
    assert statuses(report)["logprobs_mode"] == "warn" and report.logprobs_mode is None
    assert "token logprobs equal at temperature 0.5 and 1.5, the rest moved" in details(report)["logprobs_mode"]


# ---------------------------------------------------------------- the comparison on hand-made answers


def _probe(temperature: float, positions: list[dict[int, float]], sampled: list[int]) -> Probe:
    """A unary probe whose answer samples `sampled[i]` at position i, `positions[i]` its listed alternatives."""
    capture = Capture()
    for token_id, alternatives in zip(sampled, positions, strict=True):
        tops = [{"token": f"token_id:{i}", "logprob": lp} for i, lp in alternatives.items()]
        capture.logprobs.append(
            {"token": f"token_id:{token_id}", "logprob": alternatives[token_id], "top_logprobs": tops}
        )
    return Probe("unary", temperature, capture=capture)


def test_only_positions_with_the_same_context_are_compared():
    # Position 1 samples different tokens: position 2 saw different contexts and must not count.
    cool = _probe(0.5, [{1: -0.1, 2: -2.0}, {3: -0.2, 4: -1.0}, {5: -1.0, 6: -2.0}], [1, 3, 5])
    hot = _probe(1.5, [{1: -0.1, 2: -2.0}, {4: -1.0, 3: -0.2}, {5: -7.0, 6: -0.5}], [1, 4, 5])
    evidence = compare_sampling(cool, hot)
    assert (evidence.sampled_as, evidence.positions, evidence.compared, evidence.equal) == ("raw", 2, 2, 2)


def test_clamped_values_and_small_noise_do_not_count_as_moved():
    cool = _probe(0.5, [{1: -0.3, 2: -3.0, 3: -9999.0}], [1])
    hot = _probe(1.5, [{1: -0.3, 2: -3.05, 3: -12.0}], [1])  # -9999.0: top-p removed it, nothing to compare
    evidence = compare_sampling(cool, hot)
    assert (evidence.sampled_as, evidence.compared, evidence.equal) == ("raw", 1, 1)


def test_a_failed_sampling_call_says_why():
    failed = Probe("unary", 1.5, error="HTTP 400: temperature out of range")
    evidence = compare_sampling(_probe(0.5, [{1: -1.0}], [1]), failed)
    assert evidence.sampled_as is None
    assert evidence.reason == "the call at temperature 1.5 failed: HTTP 400: temperature out of range"


def test_the_gateways_sampling_settings_leave_the_probes_temperatures_alone(serve_model):
    """A gateway that sets a trainer's temperature on every call still tells processed logprobs: its probes
    sample at their own two temperatures."""
    model, url = serve_model()
    model.logprobs_mode = "processed"
    report = run_preflight(GatewayConfig(upstream=url, temperature=0.7, top_p=1.0, top_k=0))
    assert report.logprobs_mode == "processed", report.summary()
    assert {r.get("temperature") for r in model.requests} >= set(SAMPLING_TEMPERATURES)
