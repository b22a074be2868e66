"""The gateway: captures token ids and logprobs of every model call and speaks Anthropic and OpenAI.

from agentbake.gateway import GatewayConfig, create_app, read_trace
"""

from agentbake.lazy import lazy_exports

# name -> the module defining it, imported on first use (agentbake/lazy.py)
_EXPORTS = {
    "ConfigError": "agentbake.errors",
    "TraceError": "agentbake.errors",
    "export": "agentbake.export",
    "Gateway": "agentbake.gateway.app",
    "create_app": "agentbake.gateway.app",
    "GatewayConfig": "agentbake.gateway.config",
    "ModelSettings": "agentbake.gateway.model_settings",
    "GatewayError": "agentbake.gateway.errors",
    "InvalidRequest": "agentbake.gateway.errors",
    "RequestTooLarge": "agentbake.gateway.errors",
    "UpstreamError": "agentbake.gateway.errors",
    "PreflightReport": "agentbake.gateway.preflight",
    "run_preflight": "agentbake.gateway.preflight",
    "RolloutCheck": "agentbake.gateway.trace",
    "TraceRecord": "agentbake.gateway.trace",
    "TraceSummary": "agentbake.gateway.trace",
    "check": "agentbake.gateway.trace",
    "SkippedLine": "agentbake.gateway.trace",
    "Trace": "agentbake.gateway.trace",
    "load_trace": "agentbake.gateway.trace",
    "read_trace": "agentbake.gateway.trace",
    "summarize": "agentbake.gateway.trace",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
