"""The tool-call parsers token-in parses completions with, by vLLM's `--tool-call-parser` names."""

from __future__ import annotations

from agentbake.gateway.tool_parse import ToolParser
from agentbake.gateway.tool_parse_hermes import HERMES
from agentbake.gateway.tool_parse_qwen3_coder import QWEN3_CODER

PARSERS: dict[str, ToolParser] = {parser.name: parser for parser in (HERMES, QWEN3_CODER)}
"""Each name `ModelSettings.tool_call_parser` takes (`settings.TOOL_CALL_PARSERS`) -> its parser."""
