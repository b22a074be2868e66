"""task.toml read as Harbor (schema 1.x) defines it: every key is honoured (parsed into a typed value and
range-checked) or refused by name, never ignored. Descriptive keys (`[task]`, `[metadata]`, `version`,
`source`, `split`) are accepted as metadata. An error names the file, the key and the fix.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentbake.errors import TaskError
from agentbake.tasks.task_network import PUBLIC, NetworkPolicy, declared_policy
from agentbake.tasks.task_parts import (
    Artifact,
    CollectHook,
    Environment,
)
from agentbake.tasks.task_toml_reader import TomlReader

DEFAULT_TIMEOUT_SEC = 600.0
"""Harbor's default for both the agent and the verifier."""


@dataclass(frozen=True)
class TaskToml:
    """Everything task.toml says, validated; defaults are Harbor's. Each field means what `Task`'s field of the
    same name does (`environment` holds `[environment]`, which `Task` spreads over its own fields)."""

    schema_version: str | None = None
    package_name: str | None = None
    package_version: str | None = None
    agent_timeout_sec: float = DEFAULT_TIMEOUT_SEC
    agent_user: str | None = None
    agent_network: NetworkPolicy = PUBLIC
    verifier_timeout_sec: float = DEFAULT_TIMEOUT_SEC
    verifier_user: str | None = None
    verifier_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    verifier_network: NetworkPolicy = PUBLIC
    verifier_mode: Literal["shared", "separate"] = "shared"
    verifier_environment: Environment | None = None
    verifier_collect: tuple[CollectHook, ...] = ()
    solution_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    environment: Environment = field(default_factory=Environment)
    artifacts: tuple[Artifact, ...] = ()
    warnings: tuple[str, ...] = ()


def read_task_toml(file: Path, environ: Mapping[str, str] | None = None) -> TaskToml:
    """Read and check `file` (Harbor's defaults when it is absent). `environ` fills the `${VAR}` templates."""
    if not file.exists():
        return TaskToml()
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{file}: not valid TOML: {exc}") from exc
    reader = TomlReader(file, os.environ if environ is None else environ)
    reader.check_keys("", data)
    task = reader.table(data, "task")
    agent, verifier, solution = (reader.table(data, name) for name in ("agent", "verifier", "solution"))
    reader.table(data, "metadata")
    for key in ("source", "split"):
        if key in data and not isinstance(data[key], str):
            raise TaskError(f"{file}: {key}: expected a string, got {data[key]!r}")
    environment = reader.environment("environment", reader.table(data, "environment"))
    verifier_env_table = verifier.get("environment")
    verifier_environment = (
        None
        if verifier_env_table is None
        else reader.environment("verifier.environment", reader.table(verifier, "environment", "verifier.environment"))
    )
    mode = reader.verifier_mode(verifier, verifier_environment)
    baseline = verifier_environment.network if verifier_environment else environment.network
    reader.seconds(agent, "agent", "setup_timeout_sec", DEFAULT_TIMEOUT_SEC)
    unused = (
        f"{file}: [agent] setup_timeout_sec: has no effect here: agentbake installs nothing in a sandbox per "
        "rollout (the agent comes from its bundle), so there is no setup to time"
    )
    warnings = (unused,) if "setup_timeout_sec" in agent else ()
    return TaskToml(
        schema_version=reader.schema_version(data),
        package_name=reader.package_name(data, task),
        package_version=reader.string(task, "task", "version"),
        agent_timeout_sec=reader.seconds(agent, "agent", "timeout_sec", DEFAULT_TIMEOUT_SEC),
        agent_user=reader.user(agent, "agent"),
        agent_network=declared_policy(file, "agent", agent) or environment.network,
        verifier_timeout_sec=reader.seconds(verifier, "verifier", "timeout_sec", DEFAULT_TIMEOUT_SEC),
        verifier_user=reader.user(verifier, "verifier"),
        verifier_env=reader.env(verifier, "verifier"),
        verifier_network=declared_policy(file, "verifier", verifier) or baseline,
        verifier_mode=mode,
        verifier_environment=verifier_environment,
        verifier_collect=reader.collect(verifier),
        solution_env=reader.env(solution, "solution"),
        environment=environment,
        artifacts=reader.artifacts(data),
        warnings=warnings,
    )
