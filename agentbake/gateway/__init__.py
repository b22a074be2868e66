"""The gateway: captures token ids and logprobs of every model call and speaks Anthropic and OpenAI.

from agentbake.gateway import GatewayConfig, create_app, read_trace
"""

from agentbake.errors import ConfigError, TraceError
from agentbake.gateway.app import Gateway, create_app
from agentbake.gateway.config import GatewayConfig, ModelSettings
from agentbake.gateway.errors import GatewayError, InvalidRequest, RequestTooLarge, UpstreamError
from agentbake.gateway.preflight import PreflightReport, run_preflight
from agentbake.gateway.trace import RolloutCheck, TraceRecord, TraceSummary, check, iter_trace, read_trace, summarize


def __getattr__(name: str) -> object:
    """`agentbake.gateway.export` is `agentbake.export.export`, imported on first use: the gateway never loads it."""
    if name == "export":
        from agentbake.export import export

        return export
    raise AttributeError(f"module 'agentbake.gateway' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "InvalidRequest",
    "ModelSettings",
    "PreflightReport",
    "RequestTooLarge",
    "RolloutCheck",
    "TraceError",
    "TraceRecord",
    "TraceSummary",
    "UpstreamError",
    "check",
    "create_app",
    "export",
    "iter_trace",
    "read_trace",
    "run_preflight",
    "summarize",
]
