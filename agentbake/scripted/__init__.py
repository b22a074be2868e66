"""The scripted model: a vLLM-shaped chat-completions server that plays scripts or task solutions."""

from agentbake.scripted.app import ScriptedModel, start_scripted_model
from agentbake.scripted.policy import SolutionPolicy, solution_steps
from agentbake.scripted.script import Fault, Reply, Responder, Script

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
