"""The tool-call parsers token-in parses completions with, by vLLM's `--tool-call-parser` names."""

from __future__ import annotations

from agentbake.errors import ConfigError
from agentbake.gateway.settings import TOOL_CALL_PARSERS
from agentbake.gateway.tool_parse import ToolParser
from agentbake.gateway.tool_parse_hermes import HERMES
from agentbake.gateway.tool_parse_qwen3_coder import QWEN3_CODER

PARSERS: dict[str, ToolParser] = {parser.name: parser for parser in (HERMES, QWEN3_CODER)}
assert tuple(PARSERS) == TOOL_CALL_PARSERS, "settings.ToolCallParser names every parser here"


def tool_parser(name: object) -> ToolParser:
    """The parser vLLM's `--tool-call-parser NAME` runs; ConfigError naming the choices for any other name."""
    if not isinstance(name, str) or name not in PARSERS:
        raise ConfigError(
            f"tool_call_parser: {name!r} is not a parser token-in has; expected one of {', '.join(PARSERS)} "
            "(the server's vLLM --tool-call-parser)"
        )
    return PARSERS[name]
