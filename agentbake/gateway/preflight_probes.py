"""The preflight's calls: what it sends upstream and what it keeps of each answer.

Every call goes through the gateway's own request path (`Calls`), so it is sent as agents' calls are. The checks read
only what is gathered here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import orjson

from agentbake.errors import PreflightError
from agentbake.gateway.calls import Call, Calls, error_message
from agentbake.gateway.capture import Capture, choices_of, token_id_of
from agentbake.gateway.errors import UpstreamError
from agentbake.gateway.upstream import UpstreamResponse

PROMPT = "Call the tool `ping` once, or reply with one word."
PING_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answers pong.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}
MAX_TOKENS = 16
"""Enough for a word or a call to `ping`; the probe costs the server next to nothing."""

SAMPLING_TEMPERATURES = (0.5, 1.5)
"""The two temperatures the same prompt is sampled at to tell raw logprobs from processed ones: raw ones
(the policy's) do not move with temperature, processed ones (after temperature) do, by a factor near 3."""
SAMPLING_TOP_LOGPROBS = 5
"""Alternatives asked per position in the sampling probes: more tokens to compare than the sampled one."""

Mode = Literal["unary", "stream"]


@dataclass
class Probe:
    """One preflight call and what its answer carried."""

    mode: Mode
    temperature: float = 0.0
    error: str | None = None
    """Why the call got no usable answer (HTTP status and message, or a broken stream); None when it did."""
    capture: Capture = field(default_factory=Capture)
    tool_calls: list[str] = field(default_factory=list)
    """Names of the tools the answer called."""
    completion_tokens: int | None = None
    """`usage.completion_tokens`, when the server reported it."""
    rejected: list[str] = field(default_factory=list)
    """vLLM-only request fields this call had to be sent again without."""

    @property
    def entry_ids(self) -> list[int | None]:
        return [token_id_of(entry) for entry in self.capture.logprobs]


def _request(model: str, *, stream: bool, temperature: float) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [PING_TOOL],
        "max_tokens": MAX_TOKENS,
        "temperature": temperature,
        "stream": stream,
    }


def _tool_names(calls: object) -> list[str]:
    if not isinstance(calls, list):
        return []
    names = [(call.get("function") or {}).get("name") for call in calls if isinstance(call, dict)]
    return [name for name in names if isinstance(name, str) and name]


def _usage_tokens(payload: dict) -> int | None:
    usage = payload.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else None


async def probe(calls: Calls, model: str, mode: Mode, temperature: float = 0.0) -> Probe:
    """Make one preflight call through `calls` and keep what its answer carried (errors included)."""
    call = calls.begin("openai", None, _request(model, stream=mode == "stream", temperature=temperature))
    result = Probe(mode, temperature, capture=call.capture)
    sent = call.injected.extensions
    try:
        response = await calls.open(call)
        result.rejected = [name for name in sent if name not in call.injected.extensions]
        if response.status != 200:
            content = await calls.read_all(call, response)
            result.error = f"HTTP {response.status}: {error_message(content)}"
        elif mode == "unary":
            _read_unary(result, await calls.read_all(call, response))
        else:
            await _read_stream(result, calls, call, response)
    except UpstreamError as error:
        result.error = error.message
    return result


def _read_unary(probe: Probe, content: bytes) -> None:
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        probe.error = "HTTP 200 with a body that is not a JSON object"
        return
    probe.capture.add(data)
    probe.completion_tokens = _usage_tokens(data)
    for choice in choices_of(data):
        message = choice.get("message")
        if choice.get("index", 0) == 0 and isinstance(message, dict):
            probe.tool_calls = _tool_names(message.get("tool_calls"))


async def _read_stream(probe: Probe, calls: Calls, call: Call, response: UpstreamResponse) -> None:
    async def take(chunk: dict) -> None:
        tokens = _usage_tokens(chunk)
        if tokens is not None:
            probe.completion_tokens = tokens
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if choice.get("index", 0) == 0 and isinstance(delta, dict):
                probe.tool_calls += _tool_names(delta.get("tool_calls"))

    probe.error = (await calls.events(call, response, take)).fatal


async def model_name(calls: Calls) -> str:
    """The first model the upstream's `/models` lists; PreflightError naming `--model` when it lists none."""
    try:
        response = await calls.client.request("GET", "/models")
        try:
            content = await response.read()
        finally:
            response.close()
    except UpstreamError as error:
        raise PreflightError(
            f"preflight: cannot list the upstream's models: {error.message}; pass a model name"
        ) from None
    try:
        models = orjson.loads(content)["data"]
        return str(models[0]["id"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise PreflightError(
            f"preflight: GET {calls.config.upstream}/models answered HTTP {response.status} without a model list; "
            "pass a model name (--model)"
        ) from None
