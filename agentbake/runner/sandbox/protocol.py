"""The sandbox protocol: what every backend (Docker, E2B, Hugging Face) implements.

The harness only ever talks to a `SandboxHandle`, so a rollout runs the same steps on every backend.
Paths come from `handle.home` or the image's `dev.agentbake.*` labels (`SandboxHandle.paths`), never a
literal. Names follow the cloud harnesses users already know (`exec`, `start_bg`, `write_text`, ...).
What only some backends can do is said by their `Capabilities`; callers check those flags, never probe for
methods.
"""

from __future__ import annotations

import abc
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from agentbake.errors import SandboxError
from agentbake.runner.sandbox.copyout import CopyBudget, extract
from agentbake.runner.sandbox.packed import NONE_PACKED, Packed, extract_packed

if TYPE_CHECKING:
    from agentbake.runner.network import PhaseNetworks

# Packs $1/$2 to a temp file, cut at $3 bytes, and prints the file's path; exit 3 when nothing is there.
_PACK = '[ -e "$1/$2" ] || [ -L "$1/$2" ] || exit 3; a=$(mktemp) || exit 1; '
_PACK += 'tar -C "$1" -cf - -- "$2" 2>/dev/null | head -c "$3" > "$a"; echo "$a"'
_PACK_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Capabilities:
    """What a backend and its sandboxes can do beyond the methods every backend has."""

    warm_pool: bool = False
    """`SandboxBackend.warm_up(request)` starts sandboxes ahead of need, which `create` then hands out."""
    gateway_in_sandbox: bool = False
    """The rollout's gateway can run inside the sandbox (`gateway="sandbox"`): the sandbox reaches the model
    server, and `SandboxHandle.before_kill(step)` runs the trace's last fetch before the sandbox is killed."""
    task_images: bool = False
    """Tasks with their own image run here: `SandboxRequest.agent_bundle` is mounted (Docker), or the published
    layered image of the task's environment, the bundle's files in it, is started (E2B, Hugging Face)."""
    network_phases: bool = False
    """The sandbox has no network of its own: each phase reaches what its policy allows through the rollout's egress
    proxy, and the unfiltered verifier network joins when asked. Without it the backend's own network holds for both
    phases."""
    large_exec_env: bool = False
    """A command's environment may hold large values (up to 128 KiB each, about 1 MiB in all).

    The harness then hands small archives over in the environment (`harness/upload.py`), sparing a file write. Without
    it archives are written as files first."""
    egress_rules: bool = False
    """The cloud keeps each phase to its policy with its own egress rules (`SandboxRequest.networks`): the agent's
    from create, the verifier's from `SandboxHandle.enter_verifier_network()`, called once the agent is dead.
    Host names, addresses and CIDRs only; nothing of the egress proxy's (no refusal log, no package cache)."""
    verifier_sandbox: bool = False
    """The verifier can run in a sandbox of its own, made from the agent's once the agent is stopped (`snapshot`).

    Harbor's separate verifier mode needs it, and so do agent services kept alive for the tests. Without it separate
    mode is refused, and no agent service outlives the stop step."""


@dataclass(frozen=True)
class ExecResult:
    """How a command ended. A non-zero exit is a result, never an exception."""

    exit_code: int
    """The command's exit status; 124 when it was stopped for running past its timeout."""
    stdout: str
    stderr: str
    timed_out: bool = False
    """True when the command ran past its timeout and was killed."""


@dataclass(frozen=True)
class SandboxRequest:
    """What the harness asks a backend for; backend-specific settings live in the backend's config."""

    image: str
    """Image reference (Docker: the content-hash tag; remote backends: the published reference)."""
    rollout_id: str
    """Labels the sandbox (and its network) so `agentbake gc` can find it."""
    cpus: float | None = None
    """CPU limit (cores); None keeps the backend's default."""
    memory_mb: int | None = None
    """Memory limit; None keeps the backend's default."""
    storage_mb: int | None = None
    """Disk limit of the sandbox's own files (`SandboxHandle.storage_limit_mb`); None keeps the backend's
    default."""
    envs: Mapping[str, str] = field(default_factory=dict)
    """Environment of every process in the sandbox. Never the upstream API key."""
    gateway_socket: str | None = None
    """Host path of the unix socket the rollout's gateway listens on; the backend makes it reachable
    inside the sandbox as `SandboxHandle.model_url` and reaches nothing else."""
    egress_socket: str | None = None
    """Host path of the unix socket the rollout's egress proxy listens on (agentbake.egress); with
    `Capabilities.network_phases` the backend makes it reachable inside the sandbox on
    `127.0.0.1:<SandboxHandle.egress_port>`, the sandbox's only way out."""
    verifier_network: bool = False
    """The unfiltered verifier network (`--verifier-network bridge` and a public verifier policy): with
    `Capabilities.network_phases` the sandbox is made so that `connect_network()` can give it one once the
    agent is dead. The agent phase never has an interface either way."""
    networks: PhaseNetworks | None = None
    """With `Capabilities.egress_rules`: each phase's network policy, which the backend's egress rules enforce
    (None: the cloud's own network throughout)."""
    agent_bundle: str | None = None
    """For a task's own image (`Capabilities.task_images`): the agent bundle volume (agentbake.tasks.bundle)
    to mount read-only at /opt/agentbake, holding the agent and the python and git the harness runs."""


class BgJob(abc.ABC):
    """A command started in the background with `SandboxHandle.start_bg`."""

    pid: int

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> ExecResult:
        """Block until the command ends; raises `TimeoutError` when `timeout` seconds pass first."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop the command (SIGKILL); a job that already ended is left alone."""


class SandboxHandle(abc.ABC):
    """One running sandbox."""

    sandbox_id: str
    home: str
    """The image user's home directory inside the sandbox."""
    user: str
    """The image's non-root user; `exec(..., user=None)` runs as this user."""
    paths: Mapping[str, str]
    """The image's `dev.agentbake.dir.*` paths by short name (workdir, task, logs_agent, logs_verifier, ...)."""
    model_url: str | None
    """Base URL (no path) at which the rollout's gateway answers from inside the sandbox, if any."""
    egress_port: int | None = None
    """Port on the sandbox's loopback where the rollout's egress proxy answers (`SandboxRequest.egress_socket`),
    if any: the harness gives each phase's commands its variables (`agentbake.egress.sandbox_env`)."""
    storage_limit_mb: int | None = None
    """Disk limit of the sandbox's own files, which the harness watches (`disk_usage`) while the agent runs;
    None when the backend cannot measure them."""
    git: str = "git"
    """The git the harness snapshots and diffs the workdir with (a task image's: the agent bundle's)."""
    python: str | None = None
    """The sandbox's own python (label `dev.agentbake.python`; a task image's: the agent bundle's, read-only), which
    runs the guard around tests/test.sh (`harness/subreaper.py`); None when the image has none."""

    @abc.abstractmethod
    def exec(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run a command to its end (a string runs under `sh -c`); `user="root"` for setup and verifier."""

    @abc.abstractmethod
    def start_bg(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> BgJob:
        """Start a command and return at once."""

    @abc.abstractmethod
    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644, user: str | None = None) -> None:
        """Write a file, creating its parents; owned by `user` (default: the image's user)."""

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """Read a file; raises `FileNotFoundError` when it does not exist."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path`."""

    def write_text(self, path: str, text: str, *, mode: int = 0o644, user: str | None = None) -> None:
        self.write_bytes(path, text.encode(), mode=mode, user=user)

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode(errors="replace")

    def copy_out(self, path: str, dest: Path, budget: CopyBudget) -> None:
        """Copy sandbox `path` under host `dest` within `budget`, which a rollout's copies share.

        A directory's contents land in `dest`, a file inside it. Only regular files and directories are made
        (`copyout.py`); what is cut goes to `budget.notes`. This default packs `path` with a root `tar` in the sandbox
        and reads the archive whole; the Docker backend streams it."""
        parent, name = posixpath.split(posixpath.normpath(path))
        cap = min(budget.archive_bytes, budget.bytes + budget.bytes // 8 + 65536)  # headers and padding
        packed = self.exec(["sh", "-c", _PACK, "sh", parent, name, str(cap)], user="root", timeout=_PACK_TIMEOUT_S)
        if packed.exit_code == 3:
            return
        if packed.exit_code != 0:
            raise SandboxError(f"sandbox {self.sandbox_id}: cannot pack {path}: {packed.stderr.strip()[:200]}")
        archive = packed.stdout.strip()
        try:
            data = self.read_bytes(archive)
        finally:
            self.exec(["rm", "-f", archive], user="root", timeout=_PACK_TIMEOUT_S)
        extract([data], dest, budget, source=path)

    def copy_out_all(
        self, sources: Sequence[tuple[str, Path]], budget: CopyBudget, packed: Mapping[str, Packed] = NONE_PACKED
    ) -> None:
        """`copy_out` of each (sandbox path, host dest) in order under one `budget`.

        A path that cannot be copied becomes a note, and the next is still tried. A path in `packed` is extracted from
        its printed archive (`packed.py`), with no round trip. Copies run one after another: Docker's engine holds the
        container's lock for each archive stream, so parallel requests gain nothing."""
        for path, dest in sources:
            try:
                if path in packed:
                    extract_packed(packed[path], dest, budget, source=path)
                else:
                    self.copy_out(path, dest, budget)
            except Exception as exc:
                budget.note(f"{path}: not collected: {exc}")

    @abc.abstractmethod
    def kill(self) -> None:
        """End the sandbox and free everything it holds; safe to call twice."""

    def disk_usage(self) -> int | None:
        """Bytes the sandbox's own files take (what was written since it started, not its image); None when
        the backend cannot tell."""
        return None

    def changed_files(self) -> list[tuple[str, str]] | None:
        """The sandbox's files that differ from its image, as its engine sees them; None when the backend cannot tell.

        Each is (`added`, `changed` or `deleted`, path), a list no process inside the sandbox can forge."""
        return None

    def link_target(self, path: str) -> str | None:
        """Where `path` leads when it is a symbolic link, as the engine sees it; else None, or None when unknown."""
        return None

    def restart(self) -> None:
        """Kill every process in the sandbox and start it again with its files as they are.

        The way out when a fork loop holds every process slot. SandboxError when the backend cannot."""
        raise SandboxError(f"sandbox {self.sandbox_id} cannot be restarted")

    def connect_network(self) -> None:
        """Give the sandbox its network for the verifier (asked for with `SandboxRequest.verifier_network`);
        only with `Capabilities.network_phases`."""
        raise SandboxError(f"sandbox {self.sandbox_id} cannot be connected to a network")

    def enter_verifier_network(self) -> None:
        """Replace the agent phase's egress rules by the verifier's (`SandboxRequest.networks`); only with
        `Capabilities.egress_rules`."""
        raise SandboxError(f"sandbox {self.sandbox_id} has no egress rules")

    def before_kill(self, step: Callable[[], None]) -> None:
        """Run `step` before the sandbox is killed (failures are logged); only with
        `Capabilities.gateway_in_sandbox`."""
        raise SandboxError(f"sandbox {self.sandbox_id} cannot run a step before it is killed")

    def __enter__(self) -> SandboxHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def kill_all(handles: Iterable[SandboxHandle]) -> None:
    """Kill every handle (a backend's `close()`), each even when one before it failed; then one SandboxError
    naming every kill that failed."""
    errors = []
    for handle in handles:
        try:
            handle.kill()
        except SandboxError as exc:
            errors.append(str(exc))
    if errors:
        raise SandboxError("; ".join(errors))


class SandboxBackend(abc.ABC):
    """Creates sandboxes; one implementation per backend (`docker/backend.py`, `remote/e2b.py`, `remote/hf.py`)."""

    name: str
    capabilities: ClassVar[Capabilities] = Capabilities()
    """What it can do beyond `create` and `close`."""

    @abc.abstractmethod
    def create(self, request: SandboxRequest) -> SandboxHandle:
        """Start a sandbox and return once it accepts commands.

        Transient errors are retried a bounded number of times, then `SandboxError`, leaving nothing behind."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the backend holds (warm pools, clients) and remove the sandboxes it still runs."""

    def warm_up(self, request: SandboxRequest) -> None:
        """Start sandboxes for this request ahead of need and return once started; only with
        `Capabilities.warm_pool`."""
        raise SandboxError(f"the {self.name} backend keeps no warm pool")

    def snapshot(self, agent: SandboxHandle) -> SandboxHandle:
        """A sandbox started from the files of `agent` as they are now, sharing only its network.

        Services left in `agent` answer on loopback. Its `kill` and `close` remove it. Needs
        `Capabilities.verifier_sandbox`."""
        raise SandboxError(f"the {self.name} backend cannot snapshot a sandbox")

    def fresh_verifier(self, agent: SandboxHandle, request: SandboxRequest) -> SandboxHandle:
        """A new sandbox of `request.image` for `agent`'s verifier, with `agent`'s hardening, no link to it and no
        relay (`request`'s resources over `agent`'s). Only with `Capabilities.verifier_sandbox`."""
        raise SandboxError(f"the {self.name} backend cannot make a verifier's sandbox")

    def hand_over(
        self, source: SandboxHandle, target: SandboxHandle, path: str, exclude: tuple[str, ...], budget: CopyBudget
    ) -> bool:
        """`path` of `source` copied as data over `path` in `target` (`exclude`: patterns left out), within
        `budget`; False when `source` has nothing there. Only with `Capabilities.verifier_sandbox`."""
        raise SandboxError(f"the {self.name} backend cannot copy between sandboxes")
