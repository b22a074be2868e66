"""Tasks in the directory layout Harbor and Terminal-Bench use, so existing task sets run unchanged.

    my-task/
      instruction.md        the prompt (required)
      task.toml             timeouts, resources, metadata (optional; Harbor's keys)
      environment/          files copied into the agent's workdir; setup.sh there runs as root first
      solution/solve.sh     the reference solution (the scripted model and `--oracle` play it)
      tests/test.sh         the verifier, with its files (required)

A task may bring its own image (agentbake.tasks.image): `environment/Dockerfile`, built with environment/
as its context, or `[environment] docker_image`. With a Dockerfile, environment/ is only the build
context: nothing of it is copied into the workdir and its setup.sh is not run by agentbake (the
Dockerfile runs what it needs at build time, as Terminal-Bench's do). A `docker-compose.yaml` task
(several services) is refused. Keys of Harbor's task.toml that agentbake does not use are accepted and
reported in `Task.warnings`.

A task's files are read on this host (the instruction, setup.sh as root in the sandbox), so a symlink
that leads out of the task directory, or a file that is no regular file (a FIFO, a device), is refused
when the task loads: `instruction.md -> /proc/self/environ` would hand the runner's environment to the
agent.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbake.errors import TaskError

DEFAULT_TIMEOUT_SEC = 600.0
"""Harbor's default for both the agent and the verifier."""
DEFAULT_BUILD_TIMEOUT_SEC = 600.0
"""Harbor's default for building a task's environment/Dockerfile."""
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")

SETUP_SCRIPT = "setup.sh"

# section -> keys agentbake reads; KNOWN_UNUSED lists Harbor keys accepted with a warning.
USED_KEYS: dict[str, set[str]] = {
    "agent": {"timeout_sec"},
    "verifier": {"timeout_sec", "env", "user"},
    "environment": {
        "cpus",
        "memory_mb",
        "memory",
        "storage_mb",
        "storage",
        "env",
        "allow_internet",
        "docker_image",
        "build_timeout_sec",
    },
    "solution": {"env"},
}
KNOWN_UNUSED: dict[str, set[str]] = {
    "": {"version", "schema_version", "metadata", "task", "source", "split"},
    "agent": {"setup_timeout_sec", "user"},
    "verifier": {"environment"},
    "environment": {"gpus", "gpu_types", "tpu", "os", "mcp_servers"},
    "solution": set(),
}
MAX_TIMEOUT_SEC = 7 * 24 * 3600.0
"""Largest `timeout_sec` accepted (a week): past it a value is a mistake, and `inf` would overflow a wait."""
MAX_CPUS = 1024.0
MAX_SIZE_MB = 16 * 1024 * 1024
"""Largest memory or storage size accepted (16 TiB)."""
MAX_UID = 2**32 - 2
"""Largest uid accepted (2**32 - 1 is the kernel's "no uid")."""
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?|[0-9]{1,10}")
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|)\s*$", re.IGNORECASE)
_MEMORY_UNITS = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


@dataclass(frozen=True)
class Task:
    """One loaded task directory; every path is absolute."""

    path: Path
    """The task directory."""
    name: str
    """The directory's name, unique within a task set."""
    instruction: str
    """The prompt, as `instruction.md` holds it; goes to the agent on stdin."""
    tests_dir: Path
    """The verifier's directory; uploaded to `/tests` only after the agent has stopped."""
    agent_timeout_sec: float = DEFAULT_TIMEOUT_SEC
    """Seconds the agent may run before it is stopped (`[agent] timeout_sec`)."""
    verifier_timeout_sec: float = DEFAULT_TIMEOUT_SEC
    """Seconds `tests/test.sh` may run (`[verifier] timeout_sec`)."""
    cpus: float | None = None
    """CPU limit in cores (`[environment] cpus`); None keeps the runner's default."""
    memory_mb: int | None = None
    """Memory limit (`[environment] memory_mb`, or Harbor's older `memory = "4G"`)."""
    storage_mb: int | None = None
    """Disk limit of the sandbox's files (`[environment] storage_mb`, or `storage = "10G"`); None keeps the
    runner's default."""
    environment_dir: Path | None = None
    """Files copied into the agent's workdir before setup (everything but `setup.sh`); None for a task with
    a Dockerfile, whose environment/ is its image's build context."""
    setup_script: Path | None = None
    """`environment/setup.sh`, run as root before the agent starts (agentbake's extension; never for a task
    with a Dockerfile)."""
    dockerfile: Path | None = None
    """`environment/Dockerfile`: the task's own image is built from it, environment/ being the context."""
    docker_image: str | None = None
    """`[environment] docker_image`: the task's own prebuilt image (used over the Dockerfile when the engine
    has it or can pull it, as Harbor does)."""
    build_timeout_sec: float = DEFAULT_BUILD_TIMEOUT_SEC
    """Seconds building the Dockerfile may take (`[environment] build_timeout_sec`)."""
    solution_script: Path | None = None
    """`solution/solve.sh`, the reference solution."""
    environment_env: Mapping[str, str] = field(default_factory=dict)
    """`[environment] env`: variables for setup and the agent."""
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    """`[verifier] env`: variables for the verifier."""
    allow_internet: bool = True
    """`[environment] allow_internet` (Harbor's default: true). agentbake's agent phase never has network;
    the verifier phase has it when the run asks (`--verifier-network bridge`) and this is true."""
    verifier_user: str | None = None
    """`[verifier] user`: the user (a name, or a uid as text) `tests/test.sh` runs as; None runs it as root
    (the default user of most Harbor images)."""
    solution_env: Mapping[str, str] = field(default_factory=dict)
    """`[solution] env`: variables for the reference solution."""
    warnings: tuple[str, ...] = ()
    """Keys of task.toml that were accepted but are not used by agentbake."""

    @property
    def has_own_image(self) -> bool:
        """True when the task runs in its own image (Dockerfile or docker_image), with the agent layered on."""
        return self.dockerfile is not None or self.docker_image is not None

    @property
    def environment_files(self) -> list[Path]:
        """The files to copy into the workdir, sorted, relative to `environment_dir`."""
        if self.environment_dir is None:
            return []
        return sorted(
            p.relative_to(self.environment_dir)
            for p in self.environment_dir.rglob("*")
            if p.is_file() and p.relative_to(self.environment_dir) != Path(SETUP_SCRIPT)
        )

    @property
    def digest(self) -> str:
        """sha256 over every file of the task (sorted paths, length-prefixed): names what ran."""
        h = hashlib.sha256()
        for file in sorted(p for p in self.path.rglob("*") if p.is_file()):
            rel = file.relative_to(self.path).as_posix().encode()
            data = file.read_bytes()
            h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
        return h.hexdigest()


def load_task(path: str | Path) -> Task:
    """Load and check a task directory; raises `TaskError` naming the path, key and what was expected."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a directory; a task is a directory holding instruction.md and tests/test.sh")
    _check_files(root)
    instruction_file = root / "instruction.md"
    if not instruction_file.is_file():
        raise TaskError(f"{instruction_file}: missing; every task needs its prompt in instruction.md")
    instruction = instruction_file.read_text(encoding="utf-8")
    if not instruction.strip():
        raise TaskError(f"{instruction_file}: empty; write the prompt the agent gets")
    tests_dir = root / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise TaskError(
            f"{tests_dir / 'test.sh'}: missing; the verifier is tests/test.sh (it writes its reward to "
            '/logs/verifier/reward.txt, a number, or /logs/verifier/reward.json, {"reward": <number>})'
        )

    config = _Config.read(root / "task.toml")
    dockerfile, docker_image = _own_image(root, config)
    environment_dir, setup_script = (None, None) if dockerfile else _environment(root)
    solution = root / "solution" / "solve.sh"
    return Task(
        path=root,
        name=root.name,
        instruction=instruction,
        tests_dir=tests_dir,
        agent_timeout_sec=config.seconds("agent"),
        verifier_timeout_sec=config.seconds("verifier"),
        cpus=config.cpus(),
        memory_mb=config.size_mb("memory"),
        storage_mb=config.size_mb("storage"),
        environment_dir=environment_dir,
        setup_script=setup_script,
        dockerfile=dockerfile,
        docker_image=docker_image,
        build_timeout_sec=config.seconds("environment", "build_timeout_sec", DEFAULT_BUILD_TIMEOUT_SEC),
        solution_script=solution if solution.is_file() else None,
        environment_env=config.env("environment"),
        verifier_env=config.env("verifier"),
        verifier_user=config.user("verifier"),
        allow_internet=config.allow_internet(),
        solution_env=config.env("solution"),
        warnings=tuple(config.warnings),
    )


def discover_tasks(paths: Iterable[str | Path]) -> list[Task]:
    """Each path is a task directory or a folder of task directories (sorted by name)."""
    tasks: list[Task] = []
    for path in paths:
        root = Path(path)
        if (root / "instruction.md").is_file():
            tasks.append(load_task(root))
            continue
        children = sorted(p for p in root.iterdir() if (p / "instruction.md").is_file()) if root.is_dir() else []
        if not children:
            raise TaskError(f"{root}: neither a task (no instruction.md) nor a folder of tasks")
        tasks.extend(load_task(child) for child in children)
    names = [task.name for task in tasks]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise TaskError(f"two tasks share the name {duplicated[0]!r}: task directory names must be unique")
    return tasks


def load_tasks(tasks: Iterable[Task | str | Path]) -> list[Task]:
    """Tasks given as loaded `Task`s, task directories or folders of task directories (`discover_tasks`)."""
    given = list(tasks)
    loaded = [task for task in given if isinstance(task, Task)]
    paths = [task for task in given if not isinstance(task, Task)]
    return loaded + (discover_tasks(paths) if paths else [])


@dataclass
class _Config:
    """task.toml's tables, with the file named in every error."""

    file: Path
    data: dict[str, Any]
    warnings: list[str]

    @classmethod
    def read(cls, file: Path) -> _Config:
        if not file.exists():
            return cls(file, {}, [])
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise TaskError(f"{file}: not valid TOML: {exc}") from exc
        warnings: list[str] = []
        for key, value in data.items():
            if key in USED_KEYS:
                if not isinstance(value, dict):
                    raise TaskError(f"{file}: [{key}] must be a table, got {type(value).__name__}")
                for sub in value:
                    if sub not in USED_KEYS[key]:
                        known = "a Harbor key agentbake does not use" if sub in KNOWN_UNUSED[key] else "unknown key"
                        warnings.append(f"{file}: [{key}] {sub}: {known}, ignored")
            elif key not in KNOWN_UNUSED[""]:
                warnings.append(f"{file}: {key}: unknown key, ignored")
        if data.get("environment", {}).get("allow_internet") is True:
            warnings.append(
                f"{file}: [environment] allow_internet: the agent never has network in agentbake; the verifier "
                "has it with --verifier-network bridge"
            )
        return cls(file, data, warnings)

    def section(self, name: str) -> dict[str, Any]:
        return self.data.get(name, {})

    def seconds(self, section: str, key: str = "timeout_sec", default: float = DEFAULT_TIMEOUT_SEC) -> float:
        value = self.section(section).get(key, default)
        if not _is_number_within(value, MAX_TIMEOUT_SEC):
            raise TaskError(
                f"{self.file}: [{section}] {key}: expected a positive number of seconds up to "
                f"{MAX_TIMEOUT_SEC:.0f} (a week), got {value!r}"
            )
        return float(value)

    def cpus(self) -> float | None:
        value = self.section("environment").get("cpus")
        if value is None:
            return None
        if not _is_number_within(value, MAX_CPUS):
            raise TaskError(
                f"{self.file}: [environment] cpus: expected a positive number of cores up to {MAX_CPUS:.0f}, "
                f"got {value!r}"
            )
        return float(value)

    def size_mb(self, kind: str) -> int | None:
        """`[environment] <kind>_mb` (an integer of MiB) or Harbor's `<kind> = "4G"`, for memory and storage."""
        environment = self.section("environment")
        key = f"{kind}_mb"
        if key in environment:
            value = environment[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= MAX_SIZE_MB:
                raise TaskError(
                    f"{self.file}: [environment] {key}: expected an integer number of MiB "
                    f"(16 to {MAX_SIZE_MB}), got {value!r}"
                )
            return value
        if kind in environment:
            text = environment[kind]
            match = _MEMORY.match(text) if isinstance(text, str) else None
            size = float(match.group(1)) * _MEMORY_UNITS[match.group(2)[:1].upper()] if match else math.inf
            if size > MAX_SIZE_MB:
                raise TaskError(
                    f'{self.file}: [environment] {kind}: expected a size like "2G" or "512M" up to 16T, '
                    f"got {text!r}; or write {key} = 2048"
                )
            return max(16, int(size))
        return None

    def allow_internet(self) -> bool:
        value = self.section("environment").get("allow_internet", True)
        if not isinstance(value, bool):
            raise TaskError(f"{self.file}: [environment] allow_internet: expected true or false, got {value!r}")
        return value

    def user(self, section: str) -> str | None:
        """`[<section>] user`: a user name or a uid (Harbor's `str | int`); root (by name or uid 0) is None."""
        value = self.section(section).get("user")
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_UID:
            value = str(value)
        elif not (isinstance(value, str) and _USER_NAME.fullmatch(value)):
            raise TaskError(
                f'{self.file}: [{section}] user: expected a user name like "tester" or a uid like 1000, got {value!r}'
            )
        return None if value in ("root", "0") else value

    def env(self, section: str) -> dict[str, str]:
        value = self.section(section).get("env", {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise TaskError(f'{self.file}: [{section}] env: expected a table of strings, e.g. env = {{ A = "1" }}')
        return dict(value)


def _is_number_within(value: object, most: float) -> bool:
    """A number in (0, most]: never a bool, nan or inf."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value <= most


def _check_files(root: Path) -> None:
    """Refuse a symlink that leads out of the task directory (or nowhere) and anything that is neither a
    regular file nor a directory: the loader, the digest and the uploads read these files on this host."""
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            entry = Path(folder) / name
            if entry.is_symlink():
                target = Path(os.path.realpath(entry))
                if not target.is_relative_to(root):
                    raise TaskError(
                        f"{entry}: a symlink to {os.readlink(entry)}, outside the task directory {root}; task files "
                        "are never followed out of it: copy the file into the task instead"
                    )
            try:
                mode = entry.stat().st_mode
            except OSError as exc:
                raise TaskError(f"{entry}: cannot be read ({exc.strerror}); a broken symlink? remove it") from None
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise TaskError(f"{entry}: neither a file nor a directory (a FIFO, socket or device); remove it")


def _own_image(root: Path, config: _Config) -> tuple[Path | None, str | None]:
    """environment/Dockerfile and `[environment] docker_image`; a compose file is refused."""
    env_dir = root / "environment"
    for name in COMPOSE_FILES:
        if (env_dir / name).exists():
            raise TaskError(
                f"{env_dir / name}: tasks made of several services (docker compose) are not supported; agentbake "
                "runs a task in one container: give it an environment/Dockerfile or a docker_image instead"
            )
    image = config.section("environment").get("docker_image")
    if image is not None and (not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image)):
        raise TaskError(
            f'{config.file}: [environment] docker_image: expected an image reference like "ubuntu:24.04", got {image!r}'
        )
    dockerfile = env_dir / "Dockerfile"
    return (dockerfile if dockerfile.is_file() else None), image


def _environment(root: Path) -> tuple[Path | None, Path | None]:
    env_dir = root / "environment"
    if not env_dir.is_dir():
        return None, None
    setup = env_dir / SETUP_SCRIPT
    return env_dir, setup if setup.is_file() else None
