"""mini-swe-agent (`mini --yolo`): OpenAI chat completions through litellm, its commands in fenced blocks of text."""

from __future__ import annotations

import json
import posixpath

from agentbake.runner.agents.base import Agent, AgentImage, ModelAccess, register

CONFIG_FILE = ".config/mini-swe-agent/agentbake.yaml"
"""Our settings, on top of the package's `mini_textbased.yaml` (path relative to home; JSON is YAML)."""
STEP_TIMEOUT_S = 600
"""Seconds one command may run (the package's default, 30, would end most solution steps)."""


class MiniSweAgent(Agent):
    """mini-swe-agent's text-based mode: one fenced block per answer, no confirmation, the trajectory in the agent-log
    dir.

    `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` ends the task."""

    name = "mini-swe-agent"
    package = "mini-swe-agent"
    shell_tool = "mswea_bash_command"

    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        return {
            "OPENAI_API_KEY": model.token,
            # No first-run setup prompt, no banner; litellm's bundled cost map instead of fetching it from GitHub.
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # A refused call is retried twice (4 and 8 s), not nine times over minutes.
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "3",
        }

    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        # litellm has no price for the gateway's model: cost tracking would end the run at the first answer.
        config = {
            "agent": {"step_limit": 0, "cost_limit": 0},
            "model": {
                "model_class": "litellm_textbased",
                "cost_tracking": "ignore_errors",
                "model_kwargs": {"api_base": model.openai_base_url},
            },
            "environment": {"environment_class": "local", "timeout": STEP_TIMEOUT_S},
        }
        return {CONFIG_FILE: json.dumps(config, indent=2) + "\n"}

    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        return [
            "--config",
            "mini_textbased.yaml",
            "--config",
            posixpath.join(image.home, CONFIG_FILE),
            # litellm's `openai/` provider sends the rest of the name to `api_base` as the model.
            "--model",
            f"openai/{model.model_name}",
            "--yolo",
            "--exit-immediately",
            "--output",
            self._trajectory(image),
        ]

    def command(self, image: AgentImage, model: ModelAccess) -> list[str]:
        # `mini` takes the task from --task only (without it, a terminal prompt): a shell hands it stdin's text.
        return ["bash", "-c", 'exec "$0" "$@" --task "$(cat)"', image.command, *self.arguments(image, model)]

    @staticmethod
    def _trajectory(image: AgentImage) -> str:
        # Inside the agent-log dir, so the trajectory (every message and raw response) is collected with the log.
        return posixpath.join(image.logs_dir, "mini-swe-agent.traj.json")


MINI_SWE_AGENT = register(MiniSweAgent())
