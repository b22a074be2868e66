"""OpenCode (`opencode run`): OpenAI chat completions against the gateway's `/v1/chat/completions`."""

from __future__ import annotations

import json
import posixpath

from agentbake.runner.agents.base import Agent, AgentImage, ModelAccess, register

PROVIDER = "agentbake"
"""Provider id the config declares; the model is `agentbake/<model_name>`."""


class OpenCode(Agent):
    """OpenCode's one-shot `run`, every permission allowed but the web tools, events as JSON lines."""

    name = "opencode"
    package = "opencode-ai"
    shell_tool = "bash"

    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        return {
            # Else it fetches the model catalogue from models.opencode.ai on every run.
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            # Language servers are downloaded on first use of a language; there is no internet to get them from.
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            # Every run asks the npm registry for its plugin SDK, whatever else is set; a dead loopback port
            # makes that fail at once (the failure is harmless).
            "NPM_CONFIG_REGISTRY": "http://127.0.0.1:9/",
        }

    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        config = {
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "agentbake gateway",
                    "options": {"baseURL": model.openai_base_url, "apiKey": model.token},
                    "models": {model.model_name: {"name": model.model_name}},
                }
            },
            "model": f"{PROVIDER}/{model.model_name}",
            "small_model": f"{PROVIDER}/{model.model_name}",
            "autoupdate": False,
            "share": "disabled",
            # Headless: an `ask` is auto-rejected and silently ends the run with exit 0, so allow everything;
            # deny the tools that need the internet (a denied tool is not offered to the model).
            "permission": {"*": "allow", "webfetch": "deny", "websearch": "deny"},
        }
        return {".config/opencode/opencode.json": json.dumps(config, indent=2) + "\n"}

    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        # --title skips the extra title-generation model call; with no message argument the prompt is stdin.
        return ["run", "--format", "json", "--title", "agentbake"]

    def log_paths(self, image: AgentImage) -> list[str]:
        return [posixpath.join(image.home, ".local", "share", "opencode", "log")]


OPENCODE = register(OpenCode())
