"""The agent's phase and its end, the same on every backend.

The agent runs until it exits, times out or passes its storage limit (a watchdog: overlay2 cannot enforce a size).
Then every process of its user is killed; when no command can start any more (a fork loop), the sandbox is
restarted, which keeps its files.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agentbake.errors import SandboxError
from agentbake.runner.agents import AgentLaunch
from agentbake.runner.harness.commands import RootCommand, agent_gone
from agentbake.runner.harness.listeners import KEEP_SERVICES
from agentbake.runner.harness.verifier import PROCESSES
from agentbake.runner.result import Status
from agentbake.runner.sandbox import BgJob, ExecResult, SandboxHandle
from agentbake.runner.sandbox.copyout import MiB

logger = logging.getLogger("agentbake.runner")

DISK_POLL_SEC = (0.25, 1.0)
"""Seconds between measurements of the sandbox's files against its storage limit while the agent runs: soon
while they grow toward it, rarely while they do not, and never sooner than ten times what a measurement took.
The agent can write past the limit for one interval at most: a watchdog, not a quota."""
STOP_ROUNDS = 10
"""`kill -KILL -1` rounds before processes of the agent's user that keep reappearing get the sandbox restarted."""
STEP_TIMEOUT_SEC = 120.0
"""Seconds for the harness's own short steps (uploads, snapshot, diff, collection, each kill round)."""


@dataclass(frozen=True)
class AgentEnd:
    """How the agent's command ended: its result, or why it was stopped."""

    result: ExecResult | None
    """What the command returned; None when it was stopped."""
    stopped: Status | None = None
    """`agent_timeout` or `disk_limit` when it was stopped."""
    reason: str = ""


def run_agent(
    handle: SandboxHandle, launch: AgentLaunch, cwd: str, timeout_sec: float, on_start: Callable[[], None]
) -> AgentEnd:
    """Start the agent's command in `cwd` and wait for it, measuring the sandbox's files between waits."""
    job = handle.start_bg(launch.argv, envs=dict(launch.env), cwd=cwd)
    on_start()
    deadline = time.monotonic() + timeout_sec
    watch = DiskWatch(handle)
    while True:
        try:
            result = job.wait(timeout=max(0.0, min(watch.interval, deadline - time.monotonic())))
        except TimeoutError:
            if time.monotonic() >= deadline:
                _end(job)
                return AgentEnd(None, Status.AGENT_TIMEOUT, f"the agent ran past {timeout_sec:g} s")
            if over := watch.check():
                _end(job)
                return AgentEnd(None, Status.DISK_LIMIT, over)
            continue
        over = watch.check()  # what it wrote just before it exited
        return AgentEnd(result, Status.DISK_LIMIT, over) if over else AgentEnd(result)


class DiskWatch:
    """The sandbox's files against its storage limit, and when to measure them next (`interval`)."""

    def __init__(self, handle: SandboxHandle) -> None:
        self.handle = handle
        self.interval = DISK_POLL_SEC[0] if handle.storage_limit_mb is not None else math.inf
        self._last: tuple[float, int] | None = None  # when, bytes

    def check(self) -> str | None:
        """Why the files are past the limit, or None (also when they cannot be measured now)."""
        limit = self.handle.storage_limit_mb
        if limit is None:
            return None
        started = time.monotonic()
        try:
            used = self.handle.disk_usage()
        except SandboxError as exc:
            logger.warning("sandbox %s: disk use unknown: %s", self.handle.sandbox_id, exc)
            return None
        now = time.monotonic()
        if used is None:
            self.interval = math.inf
            return None
        if used > limit * MiB:
            return (
                f"the sandbox's files grew to {used // MiB} MiB (apparent sizes), past its storage limit of {limit} "
                "MiB ([environment] storage_mb, else RunnerConfig.storage_mb or the backend's default); the agent "
                "was stopped"
            )
        if self._last is None:  # no growth known yet: measure again soon
            until_full = DISK_POLL_SEC[0]
        else:
            growth = (used - self._last[1]) / max(now - self._last[0], 1e-3)
            until_full = (limit * MiB - used) / growth / 2 if growth > 0 else DISK_POLL_SEC[1]
        self._last = (now, used)
        self.interval = min(DISK_POLL_SEC[1], max(DISK_POLL_SEC[0], 10 * (now - started), until_full))
        return None


def _end(job: BgJob) -> None:
    """Kill a command the harness gives up on; when even that fails (no pid slot left), `stop_user` ends it."""
    try:
        job.kill()
    except SandboxError as exc:
        logger.warning("could not kill the agent's command: %s", exc)


@dataclass(frozen=True)
class Stopped:
    """How `stop_user` ended: a note when it had to restart the sandbox, and what its `then`'s parts printed."""

    restarted: str | None
    printed: dict[str, str]


def stop_user(
    handle: SandboxHandle,
    uid: str,
    root_env: Mapping[str, str],
    then: RootCommand,
    *,
    own: str,
    killed: bool = False,
    keep_services: bool = False,
) -> Stopped:
    """Kill every process of `uid` and check none is left; restart the sandbox when that cannot be done from inside.
    `then` runs as root in the exec that found none left.

    For a root agent, every process but `own` is killed. `killed`: the launch already killed its leftovers, so the
    first round only checks. `keep_services`: listeners are spared and stopped. SandboxError when the processes
    cannot be stopped or `then` fails."""
    try:
        alive, printed = _kill_rounds(handle, uid, root_env, then, own, killed, keep_services)
        if not alive:
            return Stopped(None, printed)
        why = f"processes of {handle.user} kept running after {STOP_ROUNDS} rounds of kill -KILL (pids {alive})"
    except SandboxError as exc:
        why = f"the processes of {handle.user} could not be stopped from inside the sandbox ({exc})"
    try:
        handle.restart()
    except SandboxError as exc:
        raise SandboxError(f"{why}; the verifier cannot run untouched ({exc})") from None
    if uid == "0":  # init and the relay started anew: they are the ones to keep now
        own = " ".join(_root(handle, root_env, PROCESSES, "list the sandbox's processes").stdout.split())
    alive, printed = _live_pids(handle, uid, root_env, then, own)
    if alive:
        raise SandboxError(f"processes of {handle.user} survived a restart of the sandbox (pids {alive})")
    return Stopped(f"{why}: the sandbox was restarted (every process killed, its files kept)", printed)


def _kill_rounds(
    handle: SandboxHandle,
    uid: str,
    root_env: Mapping[str, str],
    then: RootCommand,
    own: str,
    killed: bool,
    keep_services: bool,
) -> tuple[str, dict[str, str]]:
    """Kill the agent's processes (`kill -KILL -1` as its user) until none is left. Returns the pids still alive after
    STOP_ROUNDS rounds ("" when none) and what `then` printed."""
    if uid == "0":
        return _live_pids(handle, uid, root_env, then, own, keep_services)
    alive, ports = "", ""
    for round_ in range(STOP_ROUNDS + killed):
        if round_ or not killed:
            if keep_services:  # as the user: root cannot see its processes' sockets (listeners.py)
                killed_round = handle.exec(
                    ["sh", "-c", KEEP_SERVICES, "sh", uid], user=handle.user, cwd="/", timeout=STEP_TIMEOUT_SEC
                )
                ports = killed_round.stdout
            else:  # kill(-1) as that user reaches exactly its processes (and spares the calling shell).
                handle.exec(["sh", "-c", "kill -KILL -1"], user=handle.user, timeout=STEP_TIMEOUT_SEC)
        alive, printed = _live_pids(handle, uid, root_env, then, own, keep_services)
        if not alive:
            if keep_services:
                printed["ports"] = ports
            return "", printed
    return alive, {}


def _live_pids(
    handle: SandboxHandle,
    uid: str,
    root_env: Mapping[str, str],
    then: RootCommand,
    own: str,
    keep_services: bool = False,
) -> tuple[str, dict[str, str]]:
    """The first live pids of `uid` ("" when none) and, when none, what `then` printed. SandboxError when the listing
    or `then` fails."""
    command = agent_gone(then, root=uid == "0", keep_services=keep_services).render()
    listed = handle.exec(
        ["sh", "-c", command.script, "sh", uid, own], envs=root_env, cwd="/", timeout=STEP_TIMEOUT_SEC, user="root"
    )
    parts = command.split(listed.stdout)
    pids = parts.pop("alive", "").split()
    if listed.exit_code != 0:
        what = "run the steps after the agent's processes were stopped" if parts else "list the agent's processes"
        raise SandboxError(f"could not {what}: exit {listed.exit_code}: {listed.stderr[-300:]}")
    if not pids and not parts and then.parts:
        raise SandboxError(f"could not list the agent's processes: no answer in {listed.stdout[-300:]!r}")
    return " ".join(pids[:10]), ({} if pids else parts)


def _root(handle: SandboxHandle, root_env: Mapping[str, str], script: str, what: str) -> ExecResult:
    result = handle.exec(["sh", "-c", script], envs=root_env, cwd="/", timeout=STEP_TIMEOUT_SEC, user="root")
    if result.exit_code != 0:
        raise SandboxError(f"could not {what}: exit {result.exit_code}: {result.stderr[-300:]}")
    return result
