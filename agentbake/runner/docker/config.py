"""Settings of the Docker backend: one pydantic model; `DockerBackend(DockerConfig(...))` takes it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


def default_runtime_dir() -> Path:
    """Where sandbox folders live: under the temp dir, on the same filesystem as the gateway sockets, so those can be
    hard-linked in."""
    return Path(tempfile.gettempdir()) / f"agentbake-{os.getuid()}" / "sandboxes"


class DockerConfig(BaseModel):
    """How the Docker backend creates sandboxes. Limits apply when the task names none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: float = Field(default=2.0, gt=0)
    """CPU limit (cores) when the request names none; clamped to the engine's CPU count."""

    memory_mb: int = Field(default=4096, ge=16)
    """Memory limit (MiB) when the request names none; swap is off, so going over it OOM-kills."""

    storage_mb: int = Field(default=10240, ge=16)
    """Disk limit (MiB) of a sandbox's own files (its writable layer) when the request names none. overlay2 on
    ext4 cannot enforce a size, so the harness watches it while the agent runs (the engine's `SizeRw`, where a
    sparse file counts its full length) and stops the agent past it: status `disk_limit`."""

    pids_limit: int = Field(default=1024, ge=16)
    """Most processes (threads count) the sandbox may hold at once: a fork bomb stops there."""

    root_capabilities: tuple[str, ...] = (
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "KILL",
        "SETGID",
        "SETUID",
        "SYS_CHROOT",
        "NET_BIND_SERVICE",
    )
    """Capabilities left after `cap_drop=ALL`, usable only by root's processes (setup.sh, the verifier,
    the forwarder): own and write the agent's files, stop its processes, and drop to another user
    (`setpriv`, `runuser`: a verifier runs the agent's code as the agent's user, not as root), and what a root
    agent's services need of Docker's defaults (`sshd`'s privilege separation chroots; a web server on port 80).
    The agent's user runs with no-new-privileges and holds none of them."""

    user: str | None = None
    """Run the agent's commands as this user instead of the image's (label `dev.agentbake.user`, else
    its USER). Never root: a sandbox whose user would be root is refused."""

    ttl_s: float = Field(default=6 * 3600, gt=0)
    """Seconds after creation at which a sandbox counts as expired: `agentbake gc` removes it even while
    its owner process lives."""

    create_attempts: int = Field(default=4, ge=1)
    """Tries of `create` when the engine fails transiently (HTTP 5xx, connection errors)."""

    retry_backoff_s: float = Field(default=0.25, ge=0)
    """Wait before the second try; doubled before each further one."""

    warm: int = Field(default=0, ge=0)
    """Started sandboxes kept ready per (image, limits): `create` takes one and a new one is started in
    the background. 0 starts each sandbox on demand."""

    model_port: int = Field(default=48080, ge=1, le=65535)
    """Port on the sandbox's loopback where the forwarder relays to the gateway (`handle.model_url`)."""

    egress_port: int = Field(default=48081, ge=1, le=65535)
    """Port on the sandbox's loopback where the forwarder relays to the rollout's egress proxy (`handle.egress_port`):
    the sandbox's only way to any host its phase's network policy allows (agentbake.egress)."""

    verifier_network: str = "agentbake-verifier"
    """The Docker network a sandbox joins for its verifier when the rollout asks for one (`--verifier-network
    bridge`): a bridge network made on first use, with no traffic between its containers (icc off). A
    sandbox is created on it and disconnected before it starts, so the agent never has an interface."""

    runtime_dir: Path = Field(default_factory=default_runtime_dir)
    """Host folder holding one subfolder per sandbox (the forwarder and the gateway socket's hard
    link), mounted read-only into it. Gateway sockets must be on the same filesystem."""

    engine_timeout_s: float = Field(default=120, gt=0)
    """Timeout of one engine API call (commands themselves are bounded by their own timeout)."""
