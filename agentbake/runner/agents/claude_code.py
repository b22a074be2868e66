"""Claude Code (`claude -p`): Anthropic Messages against the gateway's `/v1/messages`."""

from __future__ import annotations

import json
import posixpath

from agentbake.runner.agents.base import Agent, AgentImage, ModelAccess, register

# Tools that reach the internet; denied so the model never sees them.
_INTERNET_TOOLS = ["WebFetch", "WebSearch"]


class ClaudeCode(Agent):
    """Claude Code in print mode, permissions bypassed, streaming its events as JSON lines."""

    name = "claude-code"
    package = "@anthropic-ai/claude-code"
    shell_tool = "Bash"

    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": model.model_url.rstrip("/"),
            # Sent as `x-api-key`; the gateway maps it to the rollout.
            "ANTHROPIC_API_KEY": model.token,
            # Every model slot names the rollout's model, so no call asks for a Claude model by accident.
            "ANTHROPIC_MODEL": model.model_name,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model.model_name,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model.model_name,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model.model_name,
            "CLAUDE_CODE_SUBAGENT_MODEL": model.model_name,
            # Without it Claude Code calls Anthropic's own hosts (feature flags, metrics) on every run.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
            # Lets --dangerously-skip-permissions run on backends whose sandbox user is root.
            "IS_SANDBOX": "1",
        }

    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        settings = {
            "permissions": {"defaultMode": "bypassPermissions", "deny": _INTERNET_TOOLS},
            "autoUpdates": False,
        }
        return {".claude/settings.json": json.dumps(settings, indent=2) + "\n"}

    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        # stream-json needs --verbose; it logs every message and tool result, ending with the result object.
        return ["-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"]

    def log_paths(self, image: AgentImage) -> list[str]:
        # Session transcripts, one JSONL file per session under a directory named after the workdir.
        return [posixpath.join(image.home, ".claude", "projects")]


CLAUDE_CODE = register(ClaudeCode())
