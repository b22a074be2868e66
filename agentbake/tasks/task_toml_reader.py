"""The value checks behind task.toml: each key's type and range, with the file, the key and the fix named."""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentbake.errors import TaskError
from agentbake.tasks.task_network import baseline_policy
from agentbake.tasks.task_parts import (
    DEFAULT_BUILD_TIMEOUT_SEC,
    DEFAULT_COLLECT_TIMEOUT_SEC,
    Artifact,
    CollectHook,
    Environment,
)

MAX_TIMEOUT_SEC = 7 * 24 * 3600.0
"""Largest timeout accepted (a week): past it a value is a mistake, and `inf` would overflow a wait."""
MAX_CPUS = 1024.0
MAX_SIZE_MB = 16 * 1024 * 1024
"""Largest memory or storage size accepted (16 TiB)."""
MAX_UID = 2**32 - 2
"""Largest uid accepted (2**32 - 1 is the kernel's "no uid")."""
KNOWN_SCHEMA_MAJOR = 1

_ENVIRONMENT_KEYS = (
    "docker_image build_timeout_sec os cpus memory_mb memory storage_mb storage gpus env workdir network_mode "
    "allowed_hosts allow_internet"
)
KEYS: dict[str, frozenset[str]] = {
    "": frozenset(
        [
            "schema_version",
            "version",
            "task",
            "metadata",
            "source",
            "split",
            "agent",
            "verifier",
            "environment",
            "solution",
            "artifacts",
        ]
    ),
    "task": frozenset(["name", "version", "description", "authors", "keywords"]),
    "agent": frozenset(["timeout_sec", "setup_timeout_sec", "user", "network_mode", "allowed_hosts"]),
    "verifier": frozenset(
        ["timeout_sec", "env", "user", "network_mode", "allowed_hosts", "environment_mode", "environment", "collect"]
    ),
    "verifier.environment": frozenset(_ENVIRONMENT_KEYS.split()),
    "verifier.collect": frozenset(["command", "service", "timeout_sec", "user"]),
    "environment": frozenset(_ENVIRONMENT_KEYS.split()),
    "solution": frozenset({"env"}),
    "artifacts": frozenset(["source", "destination", "exclude", "service"]),
    "task.authors": frozenset(["name", "email"]),
}
"""Section -> the keys agentbake honours there ("" is the top level)."""
UNSUPPORTED: dict[tuple[str, str], str] = {
    ("", "steps"): "multi-step tasks ([[steps]]) are not supported; split the task into one task per step",
    ("", "multi_step_reward_strategy"): "multi-step tasks are not supported (and this key only applies to them)",
    ("environment", "mcp_servers"): "MCP servers for the agent are not supported; remove the key",
    ("environment", "healthcheck"): "healthchecks are not supported (nothing runs before the agent but setup)",
    ("environment", "skills_dir"): "skills directories are not supported; remove the key",
    ("environment", "gpu_types"): "agentbake has no GPU sandboxes; remove the key",
    ("environment", "tpu"): "agentbake has no TPU sandboxes; remove the key",
}
"""Harbor keys agentbake refuses (unless empty), with the reason and the fix."""
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?|[0-9]{1,10}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}", re.DOTALL)
_SCHEMA = re.compile(r"(\d+)(?:\.\d+)*")
_PACKAGE_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_RESERVED_WORKDIRS = ("/proc", "/sys", "/dev", "/tests", "/logs", "/solution")


@dataclass
class TomlReader:
    """task.toml's tables, with the file named in every error."""

    file: Path
    environ: Mapping[str, str]

    def fail(self, section: str, key: str, message: str) -> TaskError:
        where = f"[{section}] {key}" if section else key
        return TaskError(f"{self.file}: {where}: {message}")

    def check_keys(self, section: str, table: dict[str, Any]) -> None:
        """Refuse a key `section` does not take, naming it and listing those it does."""
        for key in table:
            kind = "environment" if section == "verifier.environment" else section
            if (kind, key) in UNSUPPORTED:
                if table[key] in ([], {}):  # asks for nothing (Harbor writes `mcp_servers = []` by default)
                    continue
                raise self.fail(section, key, UNSUPPORTED[kind, key])
            if key not in KEYS[section]:
                takes = ", ".join(sorted(KEYS[section]))
                place = f"[{section}] takes" if section else "the top level takes"
                raise self.fail(section, key, f"unknown key; {place}: {takes}")

    def table(self, data: dict[str, Any], key: str, section: str | None = None) -> dict[str, Any]:
        """`data[key]` as a table (empty when absent), its keys checked."""
        section = section or key
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise TaskError(f"{self.file}: [{section}] must be a table, got {type(value).__name__}")
        if section != "metadata":
            self.check_keys(section, value)
        return value

    def string(self, table: dict[str, Any], section: str, key: str) -> str | None:
        value = table.get(key)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise self.fail(section, key, f"expected a non-empty string, got {value!r}")
        return value

    def schema_version(self, data: dict[str, Any]) -> str | None:
        """`schema_version`, or TB2's top-level `version` (Harbor's older name for it)."""
        found = {key: data[key] for key in ("schema_version", "version") if key in data}
        for key, value in found.items():
            if not isinstance(value, str) or not _SCHEMA.fullmatch(value):
                raise self.fail("", key, f'expected a version string like "1.0" (quoted), got {value!r}')
            if int(_SCHEMA.fullmatch(value).group(1)) != KNOWN_SCHEMA_MAJOR:
                raise self.fail("", key, f"schema {value!r} has a major version agentbake does not know (it reads 1.x)")
        if len(set(found.values())) > 1:
            raise self.fail("", "version", "differs from schema_version; keep one of them (schema_version)")
        return found.get("schema_version", found.get("version"))

    def package_name(self, data: dict[str, Any], task: dict[str, Any]) -> str | None:
        """`[task]`: name (`org/name`, required there), version, description, authors, keywords."""
        if not task and "task" not in data:
            return None
        name = task.get("name")
        if not (isinstance(name, str) and _PACKAGE_NAME.fullmatch(name) and ".." not in name):
            raise self.fail("task", "name", f'expected "org/name" (letters, digits, ".", "_", "-"), got {name!r}')
        if not isinstance(task.get("description", ""), str):
            raise self.fail("task", "description", f"expected a string, got {task['description']!r}")
        keywords = task.get("keywords", [])
        if not (isinstance(keywords, list) and all(isinstance(k, str) for k in keywords)):
            raise self.fail("task", "keywords", f'expected a list of strings like ["python"], got {keywords!r}')
        authors = task.get("authors", [])
        if not isinstance(authors, list) or not all(isinstance(a, dict) for a in authors):
            raise self.fail("task", "authors", 'expected a list of tables like [{ name = "Ada" }]')
        for author in authors:
            self.check_keys("task.authors", author)
            if not self.string(author, "task.authors", "name"):
                raise self.fail("task.authors", "name", "missing; every author needs a name")
            self.string(author, "task.authors", "email")
        return name

    def seconds(self, table: dict[str, Any], section: str, key: str, default: float) -> float:
        value = table.get(key, default)
        if not _is_number_within(value, MAX_TIMEOUT_SEC):
            raise self.fail(
                section,
                key,
                f"expected a positive number of seconds up to {MAX_TIMEOUT_SEC:.0f} (a week), got {value!r}",
            )
        return float(value)

    def cpus(self, table: dict[str, Any], section: str) -> float | None:
        value = table.get("cpus")
        if value is not None and not _is_number_within(value, MAX_CPUS):
            raise self.fail(section, "cpus", f"expected a positive number of cores up to {MAX_CPUS:.0f}, got {value!r}")
        return None if value is None else float(value)

    def size_mb(self, table: dict[str, Any], section: str, kind: str) -> int | None:
        """`<kind>_mb` (an integer of MiB) or Harbor's deprecated `<kind> = "4G"`; both given must agree."""
        key, mib = f"{kind}_mb", None
        if key in table:
            mib = table[key]
            if isinstance(mib, bool) or not isinstance(mib, int) or not 16 <= mib <= MAX_SIZE_MB:
                raise self.fail(section, key, f"expected an integer number of MiB (16 to {MAX_SIZE_MB}), got {mib!r}")
        if kind not in table:
            return mib
        text = table[kind]
        match = _SIZE.match(text) if isinstance(text, str) else None
        size = float(match.group(1)) * _SIZE_UNITS[match.group(2)[:1].upper()] if match else math.inf
        if size > MAX_SIZE_MB:
            raise self.fail(
                section, kind, f'expected a size like "2G" or "512M" up to 16T, got {text!r}; or write {key} = 2048'
            )
        if mib is not None and mib != max(16, int(size)):
            raise self.fail(section, kind, f"{text!r} differs from {key} = {mib}; keep {key} only")
        return max(16, int(size))

    def user(self, table: dict[str, Any], section: str) -> str | None:
        """`user`: a name or a uid (Harbor's `str | int`), as text; uid 0 is "root"; None when not set."""
        value = table.get("user")
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_UID:
            value = str(value)
        elif not (isinstance(value, str) and _USER_NAME.fullmatch(value)):
            raise self.fail(section, "user", f'expected a user name like "tester" or a uid like 1000, got {value!r}')
        return "root" if value == "0" else value

    def env(self, table: dict[str, Any], section: str) -> dict[str, str]:
        """`env`: names to strings; a value that is exactly `${VAR}` or `${VAR:-default}` is taken from the
        host (Harbor's rule: a template inside other text stays as written). Values are never put in errors."""
        value = table.get("env", {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail(section, "env", 'expected a table of strings, e.g. env = { A = "1" }')
        resolved: dict[str, str] = {}
        for name, text in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise self.fail(section, "env", f"{name!r} is not a variable name (letters, digits, _)")
            template = _TEMPLATE.fullmatch(text)
            if template is None:
                resolved[name] = text
            elif template.group(1) in self.environ:
                resolved[name] = self.environ[template.group(1)]
            elif template.group(2) is not None:
                resolved[name] = template.group(2)
            else:
                var = template.group(1)
                raise self.fail(
                    section,
                    "env",
                    f"{name} = ${{{var}}}, but {var} is not set in agentbake's environment; export {var} "
                    f"before the run, or give a default: ${{{var}:-value}}",
                )
        return resolved

    def workdir(self, table: dict[str, Any], section: str) -> str | None:
        value = table.get("workdir")
        if value is None:
            return None
        if not isinstance(value, str) or not value.startswith("/") or any(c.isspace() or ord(c) < 32 for c in value):
            raise self.fail(section, "workdir", f'expected an absolute path like "/app", got {value!r}')
        if ".." in value.split("/"):
            raise self.fail(section, "workdir", f"{value!r} goes through '..'; write the directory itself")
        path = "/" + posixpath.normpath(value).lstrip("/")
        if path == "/" or any(path == top or path.startswith(top + "/") for top in _RESERVED_WORKDIRS):
            raise self.fail(
                section,
                "workdir",
                f"{value!r} is / or under {', '.join(_RESERVED_WORKDIRS)} (the kernel's and the harness's); "
                'use a directory of the task, like "/app"',
            )
        return path

    def environment(self, section: str, table: dict[str, Any]) -> Environment:
        gpus = table.get("gpus", 0)
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            raise self.fail(section, "gpus", f"expected a number of GPUs (0), got {gpus!r}")
        if gpus > 0:
            raise self.fail(section, "gpus", f"{gpus}: agentbake has no GPU sandboxes; a task here needs gpus = 0")
        os_name = table.get("os", "linux")
        if not isinstance(os_name, str) or os_name.lower() not in ("linux", "windows"):
            raise self.fail(section, "os", f'expected "linux", got {os_name!r}')
        if os_name.lower() == "windows":
            raise self.fail(section, "os", "Windows tasks are not supported: agentbake runs Linux containers only")
        image = table.get("docker_image")
        if image is not None and (not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image)):
            raise self.fail(section, "docker_image", f'expected an image reference like "ubuntu:24.04", got {image!r}')
        return Environment(
            docker_image=image,
            build_timeout_sec=self.seconds(table, section, "build_timeout_sec", DEFAULT_BUILD_TIMEOUT_SEC),
            cpus=self.cpus(table, section),
            memory_mb=self.size_mb(table, section, "memory"),
            storage_mb=self.size_mb(table, section, "storage"),
            workdir=self.workdir(table, section),
            env=self.env(table, section),
            network=baseline_policy(self.file, section, table),
        )

    def verifier_mode(self, verifier: dict[str, Any], own: Environment | None) -> Literal["shared", "separate"]:
        """`environment_mode`; unset, it is "separate" when `[verifier.environment]` exists, else "shared"."""
        mode = verifier.get("environment_mode")
        if mode is None:
            return "separate" if own else "shared"
        if mode not in ("shared", "separate"):
            raise self.fail("verifier", "environment_mode", f'expected "shared" or "separate", got {mode!r}')
        if mode == "shared" and own is not None:
            raise self.fail(
                "verifier",
                "environment_mode",
                '"shared" runs the verifier in the agent\'s container, so [verifier.environment] has no use; '
                'set environment_mode = "separate" or remove [verifier.environment]',
            )
        return mode

    def collect(self, verifier: dict[str, Any]) -> tuple[CollectHook, ...]:
        hooks = verifier.get("collect", [])
        section = "verifier.collect"
        if not isinstance(hooks, list) or not all(isinstance(h, dict) for h in hooks):
            raise self.fail("verifier", "collect", 'expected [[verifier.collect]] tables, each with command = "..."')
        result = []
        for hook in hooks:
            self.check_keys(section, hook)
            if hook.get("service", "main") != "main":
                raise self.fail(
                    section, "service", f"{hook['service']!r}: only the agent's container (main) exists here"
                )
            command = hook.get("command")
            if not (isinstance(command, str) and command.strip()):
                raise self.fail(section, "command", f"expected a shell command, got {command!r}")
            timeout = self.seconds(hook, section, "timeout_sec", DEFAULT_COLLECT_TIMEOUT_SEC)
            result.append(CollectHook(command, timeout, self.user(hook, section)))
        return tuple(result)

    def artifacts(self, data: dict[str, Any]) -> tuple[Artifact, ...]:
        """Top-level `artifacts`: paths as strings, or tables of source, destination, exclude, service."""
        entries = data.get("artifacts", [])
        if not isinstance(entries, list):
            raise self.fail("", "artifacts", f'expected a list like ["/app/out.txt"], got {entries!r}')
        result = []
        for entry in entries:
            table = {"source": entry} if isinstance(entry, str) else entry
            if not isinstance(table, dict):
                raise self.fail("", "artifacts", f"expected a path or a table with source = ..., got {entry!r}")
            self.check_keys("artifacts", table)
            if table.get("service", "main") != "main":
                raise self.fail("artifacts", "service", f"{table['service']!r}: only main (the agent's container)")
            source, destination = table.get("source"), table.get("destination")
            if not (isinstance(source, str) and source.strip()) or ".." in source.split("/"):
                raise self.fail("artifacts", "source", f"expected a path in the container without '..', got {source!r}")
            if destination is not None and (
                not isinstance(destination, str)
                or destination.startswith("/")
                or ".." in destination.split("/")
                or destination.rstrip("/") in ("", "manifest.json")
            ):
                raise self.fail(
                    "artifacts",
                    "destination",
                    f"expected a relative path without '..' (not manifest.json), got {destination!r}",
                )
            exclude = table.get("exclude", [])
            if not (isinstance(exclude, list) and all(isinstance(p, str) for p in exclude)):
                raise self.fail("artifacts", "exclude", f'expected a list of patterns like ["*.pyc"], got {exclude!r}')
            result.append(Artifact(source, destination or None, tuple(exclude)))
        return tuple(result)


def _is_number_within(value: object, most: float) -> bool:
    """A number in (0, most]: never a bool, nan or inf."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value <= most
