"""The typed parts of a task.toml a `Task` holds beside its plain fields: an environment table, a collect
hook, an artifact. Read and checked by agentbake.tasks.task_toml."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentbake.tasks.task_network import PUBLIC, NetworkPolicy

DEFAULT_BUILD_TIMEOUT_SEC = 600.0
"""Harbor's default for building a task's environment/Dockerfile."""
DEFAULT_COLLECT_TIMEOUT_SEC = 60.0
"""Harbor's default for one `[[verifier.collect]]` command."""


@dataclass(frozen=True)
class Environment:
    """One environment table (`[environment]`, or `[verifier.environment]` for a separate verifier)."""

    docker_image: str | None = None
    """`docker_image`: a prebuilt image to run."""
    build_timeout_sec: float = DEFAULT_BUILD_TIMEOUT_SEC
    """`build_timeout_sec`: seconds building the image's Dockerfile may take."""
    cpus: float | None = None
    """`cpus`: CPU limit in cores; None keeps the runner's default."""
    memory_mb: int | None = None
    """`memory_mb` (or Harbor's older `memory = "4G"`): memory limit in MiB; None keeps the runner's default."""
    storage_mb: int | None = None
    """`storage_mb` (or `storage = "10G"`): disk limit of the sandbox's files in MiB; None keeps the runner's."""
    workdir: str | None = None
    """`workdir`: the directory commands run in, over the image's WORKDIR (absolute, normalized; never `/`,
    a kernel tree or one of the harness's `/tests`, `/logs`, `/solution`); None keeps the image's."""
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """`env`, with Harbor's `${VAR}` / `${VAR:-default}` taken from the host when the task loads: variables
    for the processes of this environment. Values may be secrets: never logged (not even in `repr`)."""
    network: NetworkPolicy = PUBLIC
    """`network_mode` / `allowed_hosts` / `allow_internet`: the baseline both phases run with unless their
    own table overrides it."""


@dataclass(frozen=True)
class CollectHook:
    """One `[[verifier.collect]]`: a command run in the agent's container after the agent, so runtime state reaches a
    separate verifier as files."""

    command: str
    """The shell command."""
    timeout_sec: float = DEFAULT_COLLECT_TIMEOUT_SEC
    """Seconds it may run (Harbor's default 60)."""
    user: str | None = None
    """The user (name, or uid as text; root as "root") it runs as; None is the container's default user."""


@dataclass(frozen=True)
class Artifact:
    """One `artifacts` entry: a path taken out of the agent's container, for a separate verifier and the results."""

    source: str
    """The path in the container: absolute, or relative to the workdir; never through `..`."""
    destination: str | None = None
    """Where it goes, relative to the rollout's artifacts directory; None keeps the source's name."""
    exclude: tuple[str, ...] = ()
    """tar-style patterns left out when the source is a directory."""
