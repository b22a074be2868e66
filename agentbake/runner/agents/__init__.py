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
from agentbake.runner.agents.opencode import OPENCODE, OpenCode
from agentbake.runner.agents.pi import PI, Pi

__all__ = [
    "CLAUDE_CODE",
    "CODEX",
    "OPENCODE",
    "PI",
    "Agent",
    "AgentImage",
    "AgentLaunch",
    "ClaudeCode",
    "Codex",
    "ModelAccess",
    "OpenCode",
    "Pi",
    "agent_for_labels",
    "agents",
    "get_agent",
    "headless_launch",
]
