"""The verifier step, run once every process of the agent is dead.

tests/ is unpacked, test.sh runs under its guard (`subreaper.py`), everything it left is killed, and the reward is
read as Harbor does, without following a symlink. The in-sandbox commands are in `verifier.py`; the reasons are
README.md's threat model.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from agentbake.errors import SandboxError
from agentbake.runner.harness import commands
from agentbake.runner.harness.agent_phase import STEP_TIMEOUT_SEC
from agentbake.runner.harness.upload import hand_over, tar_archive
from agentbake.runner.harness.verifier import (
    HARBOR_TESTS_DIR,
    HARBOR_VERIFIER_LOGS,
    NO_NETWORK,
    PROTECTED_ROOTS,
    REFUSED_HOSTS,
    REMOVE_ESCAPING_LINKS,
    Guard,
    RewardError,
    guard_from,
    network_failure,
    parse_reward_files,
    removed_links,
    reward_from,
    survivors,
)
from agentbake.runner.result import Status
from agentbake.runner.sandbox import ExecResult, SandboxHandle
from agentbake.runner.sandbox.packed import PackedLogs
from agentbake.tasks import Task

if TYPE_CHECKING:
    from agentbake.runner.harness.outcome import HarnessOutcome
    from agentbake.runner.network import RolloutEgress

_LOGS_PARENT = posixpath.dirname(HARBOR_VERIFIER_LOGS)
VerifierNetwork = Literal["none", "bridge", "backend", "rules"]
"""The verifier's network: `none` (loopback only, and the rollout's egress proxy when it has one), `bridge`
(the legacy unfiltered network, connected once the agent is dead), `backend` (a remote cloud's sandbox, which
has its own network throughout), `rules` (the cloud's egress rules, switched to the verifier's policy once the
agent is dead)."""
# $1: a user name or uid -> "uid gid home" from /etc/passwd; a uid with no entry -> "uid uid /"; exit 3 otherwise.
_PASSWD_ENTRY = (
    "while IFS=: read -r name _ uid gid _ home _; do "
    '[ "$name" = "$1" ] || [ "$uid" = "$1" ] && { echo "$uid $gid ${home:-/}"; exit 0; }; done < /etc/passwd; '
    'case $1 in *[!0-9]*) exit 3 ;; *) echo "$1 $1 /" ;; esac'
)


@dataclass
class VerifierPhase:
    """The verifier step: its sandbox, task and outcome, the earlier steps' facts, and helpers for root commands and
    out/."""

    handle: SandboxHandle
    task: Task
    outcome: HarnessOutcome
    workdir: str
    private: str
    """The harness's root-only scratch dir."""
    root_env: Mapping[str, str]
    own_processes: str
    """The sandbox's own processes (`verifier.PROCESSES`), the only ones that outlive test.sh."""
    network: VerifierNetwork
    archives_in_env: bool
    """tests/ may ride in the environment of the command that unpacks it (`upload.hand_over`)."""
    packed: PackedLogs
    """Where the last root command's pack of the verifier's log dir goes, for the harness's collection."""
    root: Callable[..., ExecResult]
    save: Callable[[str, str], None]
    egress: RolloutEgress | None = None
    """The rollout's egress proxy, switched here to the verifier's policy (the agent is dead)."""

    def run(self) -> None:
        user, owner, envs = "root", None, trust_workdir({**self.task.verifier_env, **self.root_env}, self.workdir)
        if self.task.verifier_user is not None:
            found = self._verifier_user(self.task.verifier_user)
            if found is None:
                return
            (owner, home), user = found, self.task.verifier_user
            envs["HOME"] = home
        tests = {
            posixpath.join(HARBOR_TESTS_DIR, p.relative_to(self.task.tests_dir).as_posix()): p
            for p in self.task.tests_dir.rglob("*")
            if p.is_file()
        }
        # Root's alone until the next command unpacks it (its environment: root's /proc/<pid>/environ; or a file in
        # the scratch dir); the agent is dead and its links are gone (stop step).
        archive = hand_over(self.handle, tar_archive(tests), self.tests_archive, in_env=self.archives_in_env)
        if self.egress is not None:  # the agent is dead: the proxy follows the verifier's policy now
            envs = {**self.egress.to_verifier(), **envs}
        if self.network == "bridge":  # the agent is dead and its links into /tests are gone
            self.handle.connect_network()
        elif self.network == "rules":  # the agent is dead: the cloud's egress rules follow the verifier's policy
            self.handle.enter_verifier_network()
        if user == "root":
            result, ended, guard = self._run_as_root({**envs, **archive.envs}, archive.unpack())
        else:
            give = f"{shlex.quote(str(owner))} {HARBOR_TESTS_DIR} {HARBOR_VERIFIER_LOGS}"
            self.root(  # /tests and the reward's folder are that user's (and root's) alone
                f"{archive.unpack()} && chown -R {give}",
                what="unpack tests/ and give it to the [verifier] user",
                cwd="/",
                envs=archive.envs,
            )
            command = commands.user_test_sh(self.handle.python).render()
            ran = self.handle.exec(
                ["sh", "-c", command.script, "sh", self.own_processes],
                envs=envs,
                cwd=self.workdir,
                timeout=self.task.verifier_timeout_sec,
                user=user,
            )
            result, guard = self._guarded(ran, command.split(ran.stdout))
            ended = self._kill_then_read_rewards()
            left = survivors(ended.stdout)
            if guard is not None and left:  # its own stop and kill left them: they could have printed the verdict
                guard = replace(
                    guard,
                    withheld=f"processes (pids {' '.join(left)}) were still running after the [verifier] user's "
                    "command had stopped and killed what tests/test.sh left: its reward is not counted",
                )
        self.save("verifier/stdout.txt", result.stdout)
        self.save("verifier/stderr.txt", result.stderr)
        self._judge(result, ended, guard)

    def _run_as_root(self, envs: Mapping[str, str], unpack: str) -> tuple[ExecResult, ExecResult, Guard | None]:
        """tests/ unpacked, test.sh as root under the guard, its leftovers killed and the rewards described, in one
        command (`commands.root_test_sh`). Returns test.sh's result, the kill-and-read's, and the guard's verdict
        (None when the command ended early)."""
        command = commands.root_test_sh(self._pack_logs, self.handle.python).render()
        both = self.handle.exec(
            ["sh", "-c", command.script, "sh", self.own_processes, unpack],
            envs=envs,
            cwd=self.workdir,
            timeout=self.task.verifier_timeout_sec,
            user="root",
        )
        parts = command.split(both.stdout)
        if "test.sh" not in parts and both.exit_code == 4:  # before test.sh: the unpack failed
            raise SandboxError(f"in sandbox {self.handle.sandbox_id}: {tail(both.stderr)}")
        result, guard = self._guarded(both, parts)
        if both.timed_out or "rewards" not in parts or guard is None:
            return result, self._kill_then_read_rewards(), guard
        self._take_logs(parts)
        return result, ExecResult(both.exit_code, parts["rewards"], both.stderr), guard

    @staticmethod
    def _guarded(ran: ExecResult, parts: Mapping[str, str]) -> tuple[ExecResult, Guard | None]:
        """test.sh's result and the guard's verdict from the command's output; None when it ended before the guard
        spoke."""
        guard = guard_from(parts["status"]) if "status" in parts else None
        exit_code = guard.exit_code if guard is not None and guard.exit_code is not None else ran.exit_code
        return replace(ran, exit_code=exit_code, stdout=parts.get("test.sh", ran.stdout)), guard

    def _kill_then_read_rewards(self) -> ExecResult:
        """Kill what test.sh or any non-root user left, then read the reward and pack the logs."""
        command = commands.kill_then_read(self._pack_logs).render()
        ended = self.handle.exec(
            ["sh", "-c", command.script, "sh", self.own_processes],
            envs=self.root_env,
            cwd="/",
            timeout=STEP_TIMEOUT_SEC,
            user="root",
        )
        parts = command.split(ended.stdout)
        self._take_logs(parts)
        return replace(ended, stdout=parts.get("rewards", ended.stdout))

    @property
    def _pack_logs(self) -> str:
        """The part that packs the verifier's log dir, once test.sh and all it left are dead."""
        return self.packed.pack([HARBOR_VERIFIER_LOGS])

    def _take_logs(self, parts: Mapping[str, str]) -> None:
        self.packed.take(parts.get("pack"), [HARBOR_VERIFIER_LOGS])

    def _verifier_user(self, user: str) -> tuple[str, str] | None:
        """`[verifier] user` as `uid:gid` and its home, from the sandbox's passwd. An unknown name is a
        `verifier_error` (None)."""
        found = self.handle.exec(
            ["sh", "-c", _PASSWD_ENTRY, "sh", user], envs=self.root_env, cwd="/", timeout=STEP_TIMEOUT_SEC, user="root"
        )
        if found.exit_code != 0 or len(found.stdout.split()) != 3:
            self.outcome.fail(
                Status.VERIFIER_ERROR,
                f"[verifier] user {user!r}: no such user in the sandbox's image (its /etc/passwd); create it in the "
                "image or remove the key to run tests/test.sh as root",
            )
            return None
        uid, gid, home = found.stdout.split()
        return f"{uid}:{gid}", home

    @property
    def tests_archive(self) -> str:
        """Where tests/'s archive is written when it does not ride in the environment."""
        return f"{self.private}/tests.tar"

    def _judge(self, result: ExecResult, ended: ExecResult, guard: Guard | None) -> None:
        task = self.task
        if result.timed_out:
            self.outcome.fail(Status.VERIFIER_TIMEOUT, f"tests/test.sh ran past {task.verifier_timeout_sec:g} s")
            return
        self.outcome.verifier_exit_code = result.exit_code
        if ended.exit_code != 0:
            self.outcome.fail(Status.VERIFIER_ERROR, f"after tests/test.sh: {tail(ended.stderr or ended.stdout)}")
            return
        if guard is None:
            guard = Guard(
                None,
                withheld=f"the command that ran tests/test.sh ended (exit {result.exit_code}) before "
                "its guard said whether a process test.sh started outlived it: its reward is not counted",
            )
        if guard.unguarded:
            self.outcome.notes.append(guard.unguarded)
        if guard.withheld:  # the reward that is there may not be test.sh's
            self.outcome.fail(Status.VERIFIER_ERROR, guard.withheld)
            return
        offline = self._offline(result.stdout + "\n" + result.stderr)
        try:
            self.outcome.reward = reward_from(parse_reward_files(ended.stdout))
        except RewardError as exc:
            exited = f" (tests/test.sh exited {result.exit_code}: {tail(result.stderr or result.stdout)})"
            said = f"{exc}{exited if result.exit_code else ''}"
            self.outcome.fail(Status.VERIFIER_ERROR, f"{said}; {offline}" if offline else said)
            return
        if offline and self.outcome.reward == 0:  # a 0 it gave for want of a network is not the agent's
            self.outcome.fail(Status.VERIFIER_ERROR, f"reward 0 not counted: {offline}")

    def _offline(self, output: str) -> str | None:
        """Why the verifier's output says it lacked the network, or None."""
        line = network_failure(output)
        if line is None:
            return None
        if self.network != "none":  # the legacy bridge, a cloud's network: nothing to tell
            return None
        if self.egress is not None:
            hosts = self.egress.refused_hosts("verifier")
            if hosts:
                return REFUSED_HOSTS.format(hosts=", ".join(hosts), mode=self.egress.verifier_mode, line=line)
            if self.egress.verifier_mode != "no-network":  # refused nothing: an upstream failure is only a note
                return None
        return NO_NETWORK.format(line)


def trust_workdir(envs: Mapping[str, str], workdir: str) -> dict[str, str]:
    """`envs` with git's `safe.directory` set for the workdir, so a verifier's git works in a workdir the agent owns.
    Set in the verifier's environment only, never in a file the agent could edit."""
    count = envs.get("GIT_CONFIG_COUNT", "0")
    first = int(count) if count.isdigit() else 0
    trusted = dict(envs)
    for n, value in enumerate((workdir, f"{workdir.rstrip('/')}/*"), start=first):
        trusted[f"GIT_CONFIG_KEY_{n}"], trusted[f"GIT_CONFIG_VALUE_{n}"] = "safe.directory", value
    trusted["GIT_CONFIG_COUNT"] = str(first + 2)
    return trusted


def clear_the_way(private: str, links: str = REMOVE_ESCAPING_LINKS, *, since: str = "@0") -> str:
    """Shell, last in the command that found the agent gone ($1: its uid): remove the agent's links into /tests or
    /logs, then make both fresh and root-owned. `since` dates a root agent's links; `links` picks which are judged."""
    roots = shlex.quote(" ".join(PROTECTED_ROOTS))
    return (
        f'(\nset -e\nset -- "$1" {roots} {private}/removed-links {shlex.quote(since)}\n'
        f"{links}rm -rf {HARBOR_TESTS_DIR} {HARBOR_VERIFIER_LOGS}\n"
        f"[ ! -L {_LOGS_PARENT} ] || rm -f {_LOGS_PARENT}\nmkdir -m 700 {HARBOR_TESTS_DIR}\n"
        f"mkdir -p {HARBOR_VERIFIER_LOGS}\nchown root:root {_LOGS_PARENT} {HARBOR_VERIFIER_LOGS}\n"
        f"chmod 755 {_LOGS_PARENT} {HARBOR_VERIFIER_LOGS}\n)"
    )


def note_removed_links(printed: str, outcome: HarnessOutcome, save: Callable[[str, str], None]) -> None:
    """What `clear_the_way` removed, listed in verifier/removed-links.txt, with a note."""
    removed = removed_links(printed)
    if removed:
        save(
            "verifier/removed-links.txt",
            "".join(f"{json.dumps(path)} -> {json.dumps(target)}\n" for path, target in removed),
        )
        outcome.notes.append(
            f"removed {len(removed)} symlinks of the agent that led into {' or '.join(PROTECTED_ROOTS)} "
            "before the verifier ran (verifier/removed-links.txt)"
        )


def tail(text: str, lines: int = 5) -> str:
    """The last lines of a command's output, on one line (for messages)."""
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"
