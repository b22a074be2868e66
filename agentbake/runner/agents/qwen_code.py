"""Qwen Code (`qwen --yolo`): OpenAI chat completions against the gateway's `/v1/chat/completions`."""

from __future__ import annotations

import json
import posixpath

from agentbake.runner.agents.base import Agent, AgentImage, ModelAccess, register

# Tools that search or fetch from the internet: excluded, never offered.
_INTERNET_TOOLS = ["web_search", "web_fetch"]


class QwenCode(Agent):
    """Qwen Code headless, every tool call approved, the gateway as its OpenAI provider, events as JSON lines."""

    name = "qwen-code"
    package = "@qwen-code/qwen-code"
    shell_tool = "run_shell_command"

    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": model.openai_base_url,
            "OPENAI_API_KEY": model.token,
            "OPENAI_MODEL": model.model_name,
        }

    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        settings = {
            "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
            "general": {"enableAutoUpdate": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "ide": {"enabled": False},
            "tools": {"exclude": _INTERNET_TOOLS},
        }
        return {".qwen/settings.json": json.dumps(settings, indent=2) + "\n"}

    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        # With no prompt argument the prompt is stdin.
        return ["--yolo", "--auth-type", "openai", "--model", model.model_name, "--output-format", "stream-json"]

    def log_paths(self, image: AgentImage) -> list[str]:
        return [posixpath.join(image.home, ".qwen", "projects")]


QWEN_CODE = register(QwenCode())
