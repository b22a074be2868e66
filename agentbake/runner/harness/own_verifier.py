"""Where the verifier runs: the agent's sandbox A, or a sandbox B of its own made from A once the agent stops.

Separate mode: B is a fresh sandbox of the task's image that receives only the artifacts, as data. Shared mode with
services kept: B is a snapshot of A sharing only its network namespace, so test.sh reaches the services but they
cannot reach B's files. B gets its own scratch dir and process list (`commands.own_verifier`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentbake.errors import SandboxError
from agentbake.runner.choices import VerifierMode
from agentbake.runner.harness import commands
from agentbake.runner.harness.agent_phase import STEP_TIMEOUT_SEC
from agentbake.runner.harness.listeners import Service, services_note
from agentbake.runner.harness.verifier import remove_escaping_links_under
from agentbake.runner.harness.verifier_phase import clear_the_way, note_removed_links, tail
from agentbake.runner.sandbox import SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.runner.sandbox.copyout import CopyBudget, MiB
from agentbake.runner.sandbox.packed import PackedLogs
from agentbake.tasks import Task

if TYPE_CHECKING:
    from agentbake.runner.harness.outcome import HarnessOutcome


HANDOVER_FILES = 100_000
HANDOVER_BYTES = 1024 * MiB
"""What separate mode's artifacts may hold in all (files and directories; bytes of file contents): past either the
verifier would judge part of them, so the rollout fails instead (they pass through a temporary file on this host)."""


@dataclass
class VerifierPlace:
    """The sandbox the verifier runs in and what the harness learned of it."""

    handle: SandboxHandle
    private: str
    """Its root-only scratch dir."""
    root_env: dict[str, str]
    """The environment of its root steps (root's own HOME, no git config)."""
    own_processes: str
    """Its own processes before any verifier code ran (`verifier.PROCESSES`)."""
    packed: PackedLogs
    """The verifier's log dir as its last root command packed it."""
    own: bool = False
    """B, the harness's to remove once its logs are collected."""


def place(
    mode: VerifierMode,
    services: list[Service],
    backend: SandboxBackend | None,
    request: SandboxRequest | None,
    agents: VerifierPlace,
    task: Task,
    outcome: HarnessOutcome,
    save: Callable[[str, str], None],
) -> VerifierPlace:
    """Where the verifier runs: separate mode's fresh sandbox, a snapshot when services were kept, else the agent's own
    sandbox."""
    workdir = agents.handle.paths["workdir"]
    if mode == "separate":
        if backend is None or request is None:
            raise SandboxError("separate verifier mode needs a backend that can make the verifier's own sandbox")
        return separate(backend, agents.handle, request, task, workdir, agents.root_env, outcome, save)
    if services:
        assert backend is not None, "services are kept only with a backend that can snapshot"
        outcome.notes.append(services_note(services))
        return snapshot(backend, agents.handle, services, agents.root_env)
    return agents


def separate(
    backend: SandboxBackend,
    agent: SandboxHandle,
    request: SandboxRequest,
    task: Task,
    workdir: str,
    root_env: Mapping[str, str],
    outcome: HarnessOutcome,
    save: Callable[[str, str], None],
) -> VerifierPlace:
    """Separate mode's B: collect hooks in A, a fresh sandbox, the artifacts copied in, escaping links removed."""
    run_collect_hooks(agent, task, workdir, root_env, outcome)
    verifier = backend.fresh_verifier(agent, request)
    try:
        budget = CopyBudget(bytes=HANDOVER_BYTES, files=HANDOVER_FILES, archive_bytes=2 * HANDOVER_BYTES)
        copied = []
        for source, exclude in artifact_paths(task, workdir):
            if backend.hand_over(agent, verifier, source, exclude, budget):
                copied.append(source)
            else:
                outcome.notes.append(f"artifact {source}: nothing there in the agent's sandbox, not handed over")
        outcome.notes += budget.finish()
        private = commands.scratch_name()
        place, printed = _prepare(verifier, private, clear_the_way(private, remove_escaping_links_under(copied)))
        note_removed_links(printed.get("links", ""), outcome, save)
    except BaseException:
        verifier.kill()
        raise
    return place


def snapshot(
    backend: SandboxBackend, agent: SandboxHandle, services: list[Service], root_env: Mapping[str, str]
) -> VerifierPlace:
    """Shared mode's B when services were kept: a snapshot of A taken while they are frozen."""
    verifier = backend.snapshot(agent)
    try:
        pids = " ".join(sorted({str(s.pid) for s in services}))
        agent.exec(
            ["sh", "-c", commands.continue_services(pids)],
            envs=root_env,
            cwd="/",
            timeout=STEP_TIMEOUT_SEC,
            user="root",
        )
        private = commands.scratch_name()
        place, _ = _prepare(verifier, private, clear_the_way(private, ""))
    except BaseException:
        verifier.kill()
        raise
    return place


def run_collect_hooks(
    agent: SandboxHandle, task: Task, workdir: str, root_env: Mapping[str, str], outcome: HarnessOutcome
) -> None:
    """Run each `[[verifier.collect]]` command in A; a failure or timeout is a note and the next still runs."""
    for hook in task.verifier_collect:
        user = hook.user or agent.user
        as_root = user in ("root", "0")
        result = agent.exec(
            ["sh", "-c", hook.command],
            envs={**task.environment_env, **(root_env if as_root else {"HOME": agent.home})},
            cwd=workdir,
            timeout=hook.timeout_sec,
            user="root" if as_root else user,
        )
        if result.timed_out:
            outcome.notes.append(f"[[verifier.collect]] {hook.command[:200]!r} ran past {hook.timeout_sec:g} s")
        elif result.exit_code != 0:
            said = tail(result.stderr or result.stdout)
            outcome.notes.append(f"[[verifier.collect]] {hook.command[:200]!r} exited {result.exit_code}: {said}")


def artifact_paths(task: Task, workdir: str) -> list[tuple[str, tuple[str, ...]]]:
    """The paths B receives (absolute, normalized) with their exclude patterns: the task's `artifacts`, else the
    workdir."""
    if not task.artifacts:
        return [(workdir, ())]
    paths = [(posixpath.normpath(posixpath.join(workdir, a.source)), a.exclude) for a in task.artifacts]
    if any(path == "/" for path, _ in paths):
        raise SandboxError(
            f"{task.path}: artifacts: / cannot be handed to a separate verifier; name the paths it reads"
        )
    return paths


def _prepare(handle: SandboxHandle, private: str, clear: str) -> tuple[VerifierPlace, dict[str, str]]:
    """B's first root step (`commands.own_verifier`); the place and what each part printed."""
    root_env = dict(commands.ROOT_ENV)
    rendered = commands.own_verifier(private, clear).render()
    result = handle.exec(
        ["sh", "-c", rendered.script, "sh", "-"], envs=root_env, cwd="/", timeout=STEP_TIMEOUT_SEC, user="root"
    )
    if result.exit_code != 0:
        raise SandboxError(
            f"could not prepare the verifier's sandbox {handle.sandbox_id}: exit {result.exit_code}: "
            f"{tail(result.stderr or result.stdout)}"
        )
    printed = rendered.split(result.stdout)
    root_env["HOME"] = printed["home"].strip()
    own = " ".join(printed["processes"].split())
    return VerifierPlace(handle, private, root_env, own, PackedLogs(private), own=True), printed
