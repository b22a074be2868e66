"""Each phase's network: the task's policy, the batch's override, and the egress proxy that enforces both.

On Docker the rollout's proxy (agentbake.egress) starts before the sandbox. It switches to the verifier's policy once
the agent is dead, and its refusals and upstream failures become notes. A remote cloud enforces policies with its
egress rules where it has them, else a policy stricter than public is refused there.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.errors import TaskError
from agentbake.tasks import Task
from agentbake.tasks.task_network import NetworkPolicy

if TYPE_CHECKING:
    from agentbake.egress import EgressService, Failure, ProxyHandle, Refusal
    from agentbake.runner.runner_config import RunnerConfig

EGRESS_DIR_PREFIX = "agentbake-egress-"
EGRESS_LOG = "egress.jsonl"
"""In the rollout's folder: one JSON line per refused or failed request (time, kind `refusal` or `failure`, phase,
host, reason)."""
VERIFIER_FAILED = "network: the verifier phase could not reach {}: its reward may be the network's, not the agent's"
"""The note of a rollout whose verifier's upstreams failed (its reward and status stay: Harbor scores it as it is)."""
_NAMED_HOSTS = 5
_MODES = {"none": "no-network", "allowlist": "allowlist", "public": "public"}


@dataclass(frozen=True)
class PhaseNetworks:
    """What each phase of one task's rollouts may reach under a run's settings."""

    agent: NetworkPolicy
    verifier: NetworkPolicy
    bridge: bool = False
    """The verifier gets the unfiltered bridge (`--verifier-network bridge`, a public verifier policy)."""

    @classmethod
    def of(cls, task: Task, config: RunnerConfig) -> PhaseNetworks:
        """The task's policies, each replaced by the run's override of its phase when there is one."""
        hosts = config.allowed_hosts
        verifier = config.verifier_network
        bridge = verifier == "bridge" and task.verifier_network.mode == "public"
        if verifier == "bridge":
            # The unfiltered path: the bridge for a public verifier, else no network at all.
            verifier_policy = task.verifier_network if bridge else NetworkPolicy("no-network")
        else:
            verifier_policy = _override(task.verifier_network, verifier, hosts)
        return cls(_override(task.agent_network, config.agent_network, hosts), verifier_policy, bridge)

    @property
    def needs_proxy(self) -> bool:
        """Whether a phase reaches anything through the proxy (else the sandbox needs none)."""
        return self.agent.mode != "no-network" or (not self.bridge and self.verifier.mode != "no-network")

    def check_remote(self, task: Task, backend: str, *, rules: bool = False, gateway_in_sandbox: bool = False) -> None:
        """Refuse a policy stricter than public on a remote cloud that cannot enforce it.

        A cloud with egress rules (`rules`) can say host names, addresses and CIDRs, with the relay let through."""
        for phase, policy in (("agent", self.agent), ("verifier", self.verifier)):
            if rules and policy.mode != "public":
                wildcards = [host for host in policy.allowed_hosts if host.startswith("*.")]
                if wildcards:
                    raise TaskError(
                        f"{task.path}: the {phase} phase allows {', '.join(wildcards)}, which the {backend} "
                        "backend's egress rules cannot say (host names, addresses and CIDRs only): list the names, "
                        "or run it with --backend docker"
                    )
                if gateway_in_sandbox and phase == "agent":
                    raise TaskError(
                        f"{task.path}: the agent phase's network is {policy.mode!r} and the gateway runs in the "
                        f"sandbox, which then cannot reach the model server; use --gateway host (the {backend} "
                        "backend lets the sandbox reach only the relay), or --agent-network public"
                    )
                continue
            if policy.mode != "public":
                raise TaskError(
                    f"{task.path}: the {phase} phase's network is {policy.mode!r}, which the {backend} backend "
                    "cannot enforce (its sandboxes reach the internet in both phases); run it with --backend "
                    f"docker, or accept the cloud's network with --{phase}-network public"
                )


def _override(declared: NetworkPolicy, override: str | None, hosts: tuple[str, ...]) -> NetworkPolicy:
    if override is None:
        return declared
    mode = _MODES[override]
    return NetworkPolicy(mode, hosts if mode == "allowlist" else ())  # type: ignore[arg-type]


class RolloutEgress:
    """One rollout's egress proxy: a socket in a private folder, the agent's policy first, the verifier's after
    `to_verifier`."""

    def __init__(self, service: EgressService, networks: PhaseNetworks, log_path: Path) -> None:
        from agentbake.egress import Policy

        self._service = service
        self._bridge = networks.bridge
        self._agent = Policy.build(networks.agent.mode, "agent", networks.agent.allowed_hosts)
        # A verifier on the unfiltered bridge reaches the network directly: the proxy then serves it nothing.
        verifier = NetworkPolicy("no-network") if networks.bridge else networks.verifier
        self._verifier = Policy.build(verifier.mode, "verifier", verifier.allowed_hosts)
        # Under the temp dir, as the gateway's: on the filesystem of DockerConfig.runtime_dir, for the hard link.
        self.folder = Path(tempfile.mkdtemp(prefix=EGRESS_DIR_PREFIX))
        try:
            self.proxy: ProxyHandle = service.start_proxy(self.folder, self._agent, log_path=log_path)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self.port: int | None = None
        """The relay's port in the sandbox (`SandboxHandle.egress_port`), once the sandbox exists."""

    @property
    def socket_path(self) -> str:
        return str(self.proxy.socket_path)

    def env(self) -> dict[str, str]:
        """The current phase's variables for a command in the sandbox (proxy, mirrors when allowed)."""
        from agentbake.egress import sandbox_env

        if self.port is None:
            return {}
        return sandbox_env(self.port, self.proxy.policy, self._service.config)

    def to_verifier(self) -> Mapping[str, str]:
        """Switch to the verifier's policy, with the agent dead, and return the verifier's proxy variables.

        Open connections are cut. A verifier on the unfiltered bridge gets no variables."""
        self.proxy.set_policy(self._verifier)
        return {} if self._bridge else self.env()

    @property
    def verifier_mode(self) -> str:
        return self._verifier.mode

    def refused_hosts(self, phase: str) -> list[str]:
        """The hosts refused in `phase` so far, most refused first."""
        return _most_first(self.proxy.refusals(), phase)

    def notes(self) -> list[str]:
        """Each refused and each failed host as a result note (`network: <host> refused|failed N times in the <phase>
        phase (why)`), and when the verifier's upstreams failed, that its reward may be the network's."""
        failures = self.proxy.failures()
        notes = [event.note for event in (*self.proxy.refusals(), *failures)]
        failed = _most_first(failures, "verifier")
        if failed:
            more = len(failed) - _NAMED_HOSTS
            named = ", ".join(failed[:_NAMED_HOSTS]) + (f" and {more} more" if more > 0 else "")
            notes.append(VERIFIER_FAILED.format(named))
        return notes

    def close(self) -> None:
        try:
            self.proxy.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _most_first(events: Sequence[Refusal | Failure], phase: str) -> list[str]:
    """The hosts of `phase`'s events, the most counted first."""
    return [event.host for event in sorted((e for e in events if e.phase == phase), key=lambda e: -e.count)]
