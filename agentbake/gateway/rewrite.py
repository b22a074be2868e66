"""Changes the gateway makes to every chat-completions request before it goes upstream."""

from __future__ import annotations

from fnmatch import fnmatchcase

from agentbake.gateway.capture import Injected
from agentbake.gateway.config import SAMPLING_FIELDS, GatewayConfig
from agentbake.gateway.errors import InvalidRequest


def rewrite_request(body: dict, config: GatewayConfig, refused: frozenset[str] | set[str] = frozenset()) -> Injected:
    """Apply model override, sampling, token caps, thinking switch and capture fields to `body` in place.

    `refused` names vLLM-only fields the upstream is known to reject."""
    if config.model_override:
        body["model"] = config.model_override
    model = body.get("model")
    if not isinstance(model, str):
        raise InvalidRequest("model: expected a string", param="model")

    for key in SAMPLING_FIELDS:
        value = getattr(config, key)
        if value is not None:
            body[key] = value

    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidRequest(f"{key}: expected an integer", param=key)
        if config.max_tokens_cap is not None and value > config.max_tokens_cap:
            body[key] = config.max_tokens_cap
    if "max_tokens" in body and any(fnmatchcase(model, p) for p in config.max_completion_tokens_models):
        body.setdefault("max_completion_tokens", body["max_tokens"])
        del body["max_tokens"]

    if config.disable_thinking:
        kwargs = body.get("chat_template_kwargs")
        body["chat_template_kwargs"] = {
            **(kwargs if isinstance(kwargs, dict) else {}),
            "enable_thinking": False,
        }

    inject_logprobs = config.capture_logprobs and not body.get("logprobs")
    if inject_logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = config.top_logprobs
    extensions = []
    # A client that asked for logprobs itself expects text tokens, not "token_id:<n>".
    if inject_logprobs and config.tokens_as_token_ids and "return_tokens_as_token_ids" not in refused:
        body["return_tokens_as_token_ids"] = True
        extensions.append("return_tokens_as_token_ids")
    inject_ids = config.request_token_ids and "return_token_ids" not in body and "return_token_ids" not in refused
    if inject_ids:
        body["return_token_ids"] = True
        extensions.append("return_token_ids")
    inject_usage = False
    if body.get("stream"):
        options = body.get("stream_options")
        options = options if isinstance(options, dict) else {}
        if not options.get("include_usage"):
            inject_usage = True
            body["stream_options"] = {**options, "include_usage": True}
    return Injected(logprobs=inject_logprobs, token_ids=inject_ids, usage=inject_usage, extensions=tuple(extensions))
