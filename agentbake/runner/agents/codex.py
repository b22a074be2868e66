"""Codex (`codex exec`): OpenAI's Responses API against the gateway's `/v1/responses`."""

from __future__ import annotations

import json
import posixpath

from agentbake.runner.agents.base import Agent, AgentImage, ModelAccess, register

PROVIDER = "agentbake"
"""Model provider id the config declares and selects."""
TOKEN_ENV = "AGENTBAKE_CODEX_TOKEN"
"""The variable the provider's `env_key` names: Codex sends its value as the bearer token."""


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


class Codex(Agent):
    """Codex's one-shot `exec`, approvals and its own sandbox off, everything that calls OpenAI disabled,
    events as JSON lines."""

    name = "codex"
    package = "@openai/codex"
    shell_tool = "exec_command"

    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        return {TOKEN_ENV: model.token}

    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        # Since 0.118 Codex ignores OPENAI_BASE_URL: the gateway is a provider of its own. Without
        # `supports_websockets = false` it tries a WebSocket first; without `unbounded_connection_retries = false`
        # an unreachable gateway is retried forever.
        config = f"""model = {_toml(model.model_name)}
model_provider = "{PROVIDER}"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"
# Commands run under `bash -c`, not a login shell whose /etc/profile replaces the image's PATH.
allow_login_shell = false

[model_providers.{PROVIDER}]
name = "agentbake gateway"
base_url = {_toml(model.openai_base_url)}
wire_api = "responses"
env_key = "{TOKEN_ENV}"
supports_websockets = false

# The curated-plugin sync calls github.com and chatgpt.com on every run; apps, subagents, goals and image
# generation add tools that need OpenAI's services or other tool types than functions.
[features]
plugins = false
remote_plugin = false
apps = false
goals = false
image_generation = false
unbounded_connection_retries = false

[agents]
enabled = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
"""
        return {".codex/config.toml": config}

    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        # `-` reads the prompt from stdin; --strict-config makes a key this version does not know an error.
        return [
            "exec",
            "--strict-config",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "--json",
            "-",
        ]

    def log_paths(self, image: AgentImage) -> list[str]:
        return [posixpath.join(image.home, ".codex", "sessions")]


CODEX = register(Codex())
