"""Exceptions shared by every agentbake package.

Each message names the file, key or field at fault, what was expected, and how to fix it. The CLI prints it as is,
without a traceback.
"""

from __future__ import annotations


class AgentbakeError(Exception):
    """Base class of every error agentbake raises on purpose."""


class SpecError(AgentbakeError):
    """An image spec (image.toml) or catalog is invalid."""


class TemplateError(AgentbakeError):
    """A Dockerfile template failed to render."""


class LockError(AgentbakeError):
    """A lock file is missing, stale or unreadable, or versions could not be resolved."""


class EngineError(AgentbakeError):
    """The Docker engine cannot be reached or refused a request."""


class BuildError(AgentbakeError):
    """An image build failed; carries the failing step and the last lines of its output."""

    def __init__(self, message: str, *, step: str | None = None, output_tail: list[str] | None = None):
        super().__init__(message)
        self.step = step
        self.output_tail = output_tail or []


class SandboxError(AgentbakeError):
    """A sandbox could not be created, reached or removed."""


class TaskError(AgentbakeError):
    """A task directory is invalid: names the path, the key and what was expected."""


class TaskImageError(TaskError):
    """A task's own image cannot be built, pulled or run by agentbake: names the task and what to do."""


class ServeError(AgentbakeError):
    """An app could not be served: its address could not be bound or its startup failed."""


class AgentError(AgentbakeError):
    """An agent is unknown, or its image lacks what the harness needs to run it."""


class PublishError(AgentbakeError):
    """Publishing to a registry, E2B or Hugging Face failed, or a published manifest is unreadable."""


class ConfigError(AgentbakeError):
    """A component (the gateway, a server) cannot start with the settings it was given."""


class PreflightError(ConfigError):
    """An upstream failed the gateway's preflight: its answers cannot be captured for training (or it could
    not be probed). `report` holds the preflight's findings when the calls were made."""

    def __init__(self, message: str, *, report: object | None = None) -> None:
        super().__init__(message)
        self.report = report


class TraceError(AgentbakeError):
    """A trace file cannot be read: names the file and line at fault."""


class JobError(AgentbakeError):
    """A job directory is taken or unreadable, or a resume asks for other settings than the job's own."""


class ReportError(AgentbakeError):
    """A job directory cannot be reported on, or the output file cannot be written."""
