"""Tasks in the directory layout Harbor and Terminal-Bench use, so existing task sets run unchanged.

    my-task/
      instruction.md        the prompt (required)
      task.toml             timeouts, resources, metadata (optional; Harbor's keys)
      environment/          files copied into the agent's workdir; setup.sh there runs as root first
      solution/solve.sh     the reference solution (the scripted model and `--oracle` play it)
      tests/test.sh         the verifier, with its files (required)

A task may bring its own image: `environment/Dockerfile` (environment/ is then only its build context) or
`[environment] docker_image`. `docker-compose.yaml` tasks are refused. task.toml keys are honoured or refused by
name, never ignored (task_toml.py). A symlink out of the task directory, or a FIFO or device in it, is refused:
these files are read on this host.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentbake.errors import TaskError
from agentbake.tasks.task_network import PUBLIC, NetworkPolicy
from agentbake.tasks.task_parts import DEFAULT_BUILD_TIMEOUT_SEC, Artifact, CollectHook, Environment
from agentbake.tasks.task_toml import DEFAULT_TIMEOUT_SEC, read_task_toml

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")

SETUP_SCRIPT = "setup.sh"


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
    workdir: str | None = None
    """`[environment] workdir`: the directory the agent, the oracle and the verifier run in, over the
    image's WORKDIR (absolute, normalized, never `/`, /proc, /sys, /dev, /tests, /logs, /solution); None
    keeps the image's (`/app` when it names none)."""
    environment_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """`[environment] env`, `${VAR}` / `${VAR:-default}` filled from the host when the task loads (Harbor's
    rule): variables for setup and the agent. May hold secrets: never log them (hidden from `repr`)."""
    verifier_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """`[verifier] env`, filled the same way: variables for `tests/test.sh`. May hold secrets."""
    solution_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """`[solution] env`, filled the same way: variables for the oracle's `solve.sh`. May hold secrets."""
    agent_user: str | None = None
    """`[agent] user`: the user (a name, or a uid as text; uid 0 is "root") the agent and the oracle run
    as. None: the task says nothing, so Harbor's rule applies (the image's own user, root when its Dockerfile
    sets none)."""
    verifier_user: str | None = None
    """`[verifier] user`: the user (a name, or a uid as text) `tests/test.sh` runs as; None runs it as root
    (the default user of most Harbor images; `user = "root"` or `0` is None too)."""
    agent_network: NetworkPolicy = PUBLIC
    """What the agent phase (and the oracle) may reach: `[agent] network_mode` / `allowed_hosts` when set
    (they replace the environment's, as in Harbor), else `[environment]`'s, else Harbor's default public."""
    verifier_network: NetworkPolicy = PUBLIC
    """What the verifier phase may reach: `[verifier] network_mode` / `allowed_hosts` when set, else the
    environment the verifier runs in (`[verifier.environment]` in separate mode when given, whose own
    default is public, else `[environment]`), else public."""
    verifier_mode: Literal["shared", "separate"] = "shared"
    """`[verifier] environment_mode`: "shared" runs test.sh in the agent's container; "separate" in a fresh
    container that gets only the declared `artifacts` (Harbor: the default is "separate" when
    `[verifier.environment]` exists, else "shared")."""
    verifier_environment: Environment | None = None
    """`[verifier.environment]` (same keys as `[environment]`): the separate verifier's own image
    (`docker_image`; without one, the task's image), resources, workdir, env and network baseline. None
    when the table is absent: a separate verifier then runs in a fresh copy of `[environment]`."""
    verifier_collect: tuple[CollectHook, ...] = ()
    """`[[verifier.collect]]`: commands run in the agent's container after the agent phase, before the
    artifacts are taken (so runtime state can be written into files a separate verifier receives)."""
    artifacts: tuple[Artifact, ...] = ()
    """Top-level `artifacts`: paths taken out of the agent's container after it finishes; in separate mode
    what the verifier's container receives."""
    schema_version: str | None = None
    """`schema_version` (or TB2's top-level `version`): always 1.x; None when the file says none."""
    package_name: str | None = None
    """`[task] name`, Harbor's registry name `org/name`; None when there is no `[task]` table."""
    package_version: str | None = None
    """`[task] version`, as written."""
    warnings: tuple[str, ...] = ()
    """Keys the task sets that are valid but do nothing in agentbake (the runner prints them); today only
    `[agent] setup_timeout_sec`."""

    @property
    def allow_internet(self) -> bool:
        """True when the verifier phase may reach the whole internet (its policy is public): what the
        runner's `--verifier-network bridge` grants. An allowlist is not the whole internet, so it is False."""
        return self.verifier_network.mode == "public"

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

    config = read_task_toml(root / "task.toml")
    environment = config.environment
    dockerfile = _own_image(root)
    environment_dir, setup_script = (None, None) if dockerfile else _environment(root)
    solution = root / "solution" / "solve.sh"
    return Task(
        path=root,
        name=root.name,
        instruction=instruction,
        tests_dir=tests_dir,
        agent_timeout_sec=config.agent_timeout_sec,
        verifier_timeout_sec=config.verifier_timeout_sec,
        cpus=environment.cpus,
        memory_mb=environment.memory_mb,
        storage_mb=environment.storage_mb,
        environment_dir=environment_dir,
        setup_script=setup_script,
        dockerfile=dockerfile,
        docker_image=environment.docker_image,
        build_timeout_sec=environment.build_timeout_sec,
        solution_script=solution if solution.is_file() else None,
        workdir=environment.workdir,
        environment_env=environment.env,
        verifier_env=config.verifier_env,
        solution_env=config.solution_env,
        agent_user=config.agent_user,
        verifier_user=None if config.verifier_user == "root" else config.verifier_user,
        agent_network=config.agent_network,
        verifier_network=config.verifier_network,
        verifier_mode=config.verifier_mode,
        verifier_environment=config.verifier_environment,
        verifier_collect=config.verifier_collect,
        artifacts=config.artifacts,
        schema_version=config.schema_version,
        package_name=config.package_name,
        package_version=config.package_version,
        warnings=config.warnings,
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


def _check_files(root: Path) -> None:
    """Refuse a symlink leading out of the task directory (or nowhere) and anything that is not a regular file or
    directory: these files are read on this host."""
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


def _own_image(root: Path) -> Path | None:
    """environment/Dockerfile, if any; a compose file is refused."""
    env_dir = root / "environment"
    for name in COMPOSE_FILES:
        if (env_dir / name).exists():
            raise TaskError(
                f"{env_dir / name}: tasks made of several services (docker compose) are not supported; agentbake "
                "runs a task in one container: give it an environment/Dockerfile or a docker_image instead"
            )
    dockerfile = env_dir / "Dockerfile"
    return dockerfile if dockerfile.is_file() else None


def _environment(root: Path) -> tuple[Path | None, Path | None]:
    env_dir = root / "environment"
    if not env_dir.is_dir():
        return None, None
    setup = env_dir / SETUP_SCRIPT
    return env_dir, setup if setup.is_file() else None
