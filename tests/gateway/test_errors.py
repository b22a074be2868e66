"""Upstream failures mapped to what an Anthropic client acts on, and the error envelopes."""

from __future__ import annotations

import pytest

from agentbake.gateway.errors import upstream_status_error, upstream_timeout, upstream_unavailable
from agentbake.gateway.translate_request import fail


@pytest.mark.parametrize(
    ("upstream", "status", "error_type"),
    [
        (400, 400, "invalid_request_error"),
        (401, 401, "authentication_error"),
        (403, 403, "permission_error"),
        (404, 404, "not_found_error"),
        (413, 413, "request_too_large"),
        (422, 400, "invalid_request_error"),
        (429, 429, "rate_limit_error"),
        (500, 500, "api_error"),
        (502, 502, "api_error"),
        (503, 529, "overloaded_error"),
        (529, 529, "overloaded_error"),
        (418, 418, "invalid_request_error"),
    ],
)
def test_status_mapping(upstream, status, error_type):
    error = upstream_status_error(upstream, "why", None)
    assert (error.status, error.error_type) == (status, error_type)
    assert error.anthropic_body() == {
        "type": "error",
        "error": {"type": error_type, "message": f"upstream returned {upstream}: why"},
    }


def test_retry_after_is_kept_and_transport_failures_are_retryable():
    assert upstream_status_error(429, "slow", b"12").headers == [(b"retry-after", b"12")]
    assert upstream_unavailable("refused").status == 529
    assert upstream_timeout("read").status == 504


def test_the_openai_envelopes_name_the_field_at_fault():
    error = fail("input[2].call_id", "expected a string, got null")
    message = "input[2].call_id: expected a string, got null"
    fields = {"message": message, "type": "invalid_request_error", "param": "input[2].call_id"}
    assert error.responses_body() == {"error": {**fields, "code": None}}
    assert error.openai_body() == {"error": {**fields, "code": 400}}  # vLLM's: the status as code
