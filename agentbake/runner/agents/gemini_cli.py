"""Gemini CLI (`gemini --yolo`): Google's Gemini API against the gateway's `/v1beta/models/{model}:...`."""

from __future__ import annotations

import json
import posixpath

from agentbake.runner.agents.base import Agent, AgentImage, ModelAccess, register

# Tools that run at Google (search grounding, URL context) or fetch from the internet: excluded, never offered.
_INTERNET_TOOLS = ["google_web_search", "web_fetch"]


class GeminiCli(Agent):
    """Gemini CLI headless, every tool call approved, the gateway as its Gemini API, events as JSON lines."""

    name = "gemini-cli"
    package = "@google/gemini-cli"
    shell_tool = "run_shell_command"

    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        return {
            # The Gemini API's base: the SDK appends `/v1beta/models/...`; the key goes as `x-goog-api-key`.
            "GOOGLE_GEMINI_BASE_URL": model.model_url.rstrip("/"),
            "GEMINI_API_KEY": model.token,
            # An untrusted folder ignores --yolo.
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }

    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        settings = {
            # With a base URL set, auto-detection picks the `gateway` auth type; the API key one is pinned.
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "ide": {"enabled": False},
            "tools": {"exclude": _INTERNET_TOOLS},
        }
        return {".gemini/settings.json": json.dumps(settings, indent=2) + "\n"}

    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        # With no prompt argument the prompt is stdin.
        return ["--yolo", "--model", model.model_name, "--output-format", "stream-json"]

    def log_paths(self, image: AgentImage) -> list[str]:
        return [posixpath.join(image.home, ".gemini", "tmp")]


GEMINI_CLI = register(GeminiCli())
