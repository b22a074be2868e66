"""Agent harness data: how each catalog agent runs headless against the rollout's gateway."""

from agentbake.runner.agents.base import (
    Agent,
    AgentImage,
    AgentLaunch,
    ModelAccess,
    agent_for_labels,
    agents,
    get_agent,
    headless_launch,
)
from agentbake.runner.agents.claude_code import CLAUDE_CODE, ClaudeCode
from agentbake.runner.agents.codex import CODEX, Codex
from agentbake.runner.agents.gemini_cli import GEMINI_CLI, GeminiCli
from agentbake.runner.agents.mini_swe_agent import MINI_SWE_AGENT, MiniSweAgent
from agentbake.runner.agents.opencode import OPENCODE, OpenCode
from agentbake.runner.agents.pi import PI, Pi
from agentbake.runner.agents.qwen_code import QWEN_CODE, QwenCode

__all__ = [
    "CLAUDE_CODE",
    "CODEX",
    "GEMINI_CLI",
    "MINI_SWE_AGENT",
    "OPENCODE",
    "PI",
    "QWEN_CODE",
    "Agent",
    "AgentImage",
    "AgentLaunch",
    "ClaudeCode",
    "Codex",
    "GeminiCli",
    "MiniSweAgent",
    "ModelAccess",
    "OpenCode",
    "Pi",
    "QwenCode",
    "agent_for_labels",
    "agents",
    "get_agent",
    "headless_launch",
]
