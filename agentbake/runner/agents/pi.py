"""Pi (`pi -p`): OpenAI chat completions against the gateway's `/v1/chat/completions`."""

from __future__ import annotations

import json
import posixpath

from agentbake.runner.agents.base import Agent, AgentImage, ModelAccess, register

PROVIDER = "agentbake"
"""Provider id `models.json` declares."""


class Pi(Agent):
    """Pi in print mode (final answer on stdout, the transcript in its session file); Pi has no permission
    prompts, every tool call runs."""

    name = "pi"
    package = "@mariozechner/pi-coding-agent"
    shell_tool = "bash"

    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        return {
            # No update check, no install telemetry, no downloading of missing tools (fd, rg) from GitHub.
            "PI_OFFLINE": "1",
            "PI_CODING_AGENT_SESSION_DIR": self._session_dir(image),
        }

    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        models = {
            "providers": {
                PROVIDER: {
                    "baseUrl": model.openai_base_url,
                    "api": "openai-completions",
                    "apiKey": model.token,
                    "models": [{"id": model.model_name}],
                }
            }
        }
        # Compaction off: Pi takes a 400 without a parsable body for a context overflow and compacts; when
        # the summary call fails too it ends with exit 0 and no answer, a failure that looks like success.
        # Off, an overflow ends the run with exit 1 and the trace stays one unrewritten conversation.
        settings = {"compaction": {"enabled": False}}
        return {
            ".pi/agent/models.json": json.dumps(models, indent=2) + "\n",
            ".pi/agent/settings.json": json.dumps(settings, indent=2) + "\n",
        }

    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        # Default tools (read, bash, edit, write) need no internet; with no message argument the prompt is stdin.
        return ["-p", "--provider", PROVIDER, "--model", model.model_name]

    @staticmethod
    def _session_dir(image: AgentImage) -> str:
        # Inside the agent-log dir, so the session transcript is collected with the log.
        return posixpath.join(image.logs_dir, "pi-sessions")


PI = register(Pi())
