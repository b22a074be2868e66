"""The scripted model: a vLLM-shaped chat-completions server that plays scripts or task solutions."""

from agentbake.scripted.app import ScriptedModel, start_scripted_model
from agentbake.scripted.policy import SolutionPolicy
from agentbake.scripted.script import Fault, Reply, Responder, Script
from agentbake.scripted.shell_steps import solution_steps

__all__ = [
    "Fault",
    "Reply",
    "Responder",
    "Script",
    "ScriptedModel",
    "SolutionPolicy",
    "solution_steps",
    "start_scripted_model",
]
