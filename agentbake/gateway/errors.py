"""Gateway exceptions, and their shapes in the Anthropic, OpenAI chat, Responses and Gemini dialects.

Statuses are chosen for what clients do with them. Claude Code retries 5xx and 529, honours `retry-after` on 429, and
gives up on 400 and 404.
"""

from __future__ import annotations

from agentbake.errors import AgentbakeError


class GatewayError(AgentbakeError):
    """A failure answered to the client with `status` and an Anthropic `error_type`."""

    status = 500
    error_type = "api_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if error_type is not None:
            self.error_type = error_type
        self.param = param
        """The request field at fault (a JSON path such as `input[2].call_id`), if one is."""
        self.code = code
        """A machine-readable code for Responses clients (`previous_response_not_found`), if any."""
        self.headers: list[tuple[bytes, bytes]] = []

    def anthropic_body(self) -> dict:
        """The Anthropic Messages error envelope."""
        return {"type": "error", "error": {"type": self.error_type, "message": self.message}}

    def openai_body(self) -> dict:
        """The chat-completions error envelope, as vLLM writes it (`code` is the HTTP status)."""
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status}}

    def responses_body(self) -> dict:
        """The Responses API error envelope (`code` a string or null, as OpenAI's Responses errors have it)."""
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}

    def google_error(self) -> tuple[int, dict]:
        """The HTTP status and Gemini error envelope `{"error": {"code", "message", "status"}}`.

        529 becomes 503 UNAVAILABLE, which Gemini clients retry."""
        status = 503 if self.status == 529 else self.status
        name = _GOOGLE_STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
        return status, {"error": {"code": status, "message": self.message, "status": name}}


class InvalidRequest(GatewayError):
    """The client's request is malformed; the message names the offending field."""

    status = 400
    error_type = "invalid_request_error"


class RequestTooLarge(GatewayError):
    """The client's body exceeds `max_body_bytes`."""

    status = 413
    error_type = "request_too_large"


class Overloaded(GatewayError):
    """The gateway holds as many request bodies as `max_body_bytes_in_flight` allows: try again later."""

    status = 529
    error_type = "overloaded_error"


class TraceFull(RequestTooLarge):
    """The trace reached `max_trace_bytes`: no more calls are taken (413, which clients do not retry)."""


class Unauthorized(GatewayError):
    """The request lacks the gateway's `client_token` (or carries a wrong one)."""

    status = 401
    error_type = "authentication_error"


class Forbidden(GatewayError):
    """The request names a rollout this gateway does not serve."""

    status = 403
    error_type = "permission_error"


class RouteNotFound(GatewayError):
    """No endpoint at this path (or this method)."""

    status = 404
    error_type = "not_found_error"


class UpstreamError(GatewayError):
    """The upstream failed: an HTTP error status, no connection, a timeout or a broken stream."""


# HTTP status -> Google's canonical status name (google.rpc.Code), as Gemini errors carry it.
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

# Upstream status -> (status for an Anthropic client, Anthropic error type).
# 503 and 529 both mean "try again later": Claude Code retries 529 with backoff.
_ANTHROPIC_STATUS: dict[int, tuple[int, str]] = {
    400: (400, "invalid_request_error"),
    401: (401, "authentication_error"),
    403: (403, "permission_error"),
    404: (404, "not_found_error"),
    413: (413, "request_too_large"),
    422: (400, "invalid_request_error"),
    429: (429, "rate_limit_error"),
    503: (529, "overloaded_error"),
    529: (529, "overloaded_error"),
}


def upstream_status_error(status: int, message: str, retry_after: bytes | None) -> UpstreamError:
    """Map an upstream HTTP error to the error an Anthropic client should see."""
    if status in _ANTHROPIC_STATUS:
        mapped, error_type = _ANTHROPIC_STATUS[status]
    elif status >= 500:
        mapped, error_type = status, "api_error"
    else:
        mapped, error_type = status, "invalid_request_error"
    error = UpstreamError(f"upstream returned {status}: {message}", status=mapped, error_type=error_type)
    if retry_after is not None:
        error.headers.append((b"retry-after", retry_after))
    return error


def upstream_unavailable(detail: str) -> UpstreamError:
    """The upstream cannot be reached: 529 so clients back off and retry."""
    return UpstreamError(f"upstream unavailable: {detail}", status=529, error_type="overloaded_error")


def upstream_timeout(detail: str) -> UpstreamError:
    """The upstream went silent for longer than `read_timeout_s`."""
    return UpstreamError(f"upstream timed out: {detail}", status=504, error_type="api_error")
