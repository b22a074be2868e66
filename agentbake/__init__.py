"""agentbake: reproducible, fast and safe sandboxes for training coding agents."""

from agentbake.errors import AgentbakeError, BuildError, EngineError, LockError, SpecError, TemplateError

__version__ = "0.1.0"

__all__ = ["AgentbakeError", "BuildError", "EngineError", "LockError", "SpecError", "TemplateError", "__version__"]
