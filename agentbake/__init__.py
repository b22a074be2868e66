"""agentbake: reproducible, fast and safe sandboxes for training coding agents."""

from agentbake.errors import (
    AgentbakeError,
    AgentError,
    BuildError,
    ConfigError,
    EngineError,
    JobError,
    LockError,
    PreflightError,
    PublishError,
    ReportError,
    SandboxError,
    ServeError,
    SpecError,
    TaskError,
    TaskImageError,
    TemplateError,
    TraceError,
)

__version__ = "0.1.0"

__all__ = [
    "AgentError",
    "AgentbakeError",
    "BuildError",
    "ConfigError",
    "EngineError",
    "JobError",
    "LockError",
    "PreflightError",
    "PublishError",
    "ReportError",
    "SandboxError",
    "ServeError",
    "SpecError",
    "TaskError",
    "TaskImageError",
    "TemplateError",
    "TraceError",
    "__version__",
]
