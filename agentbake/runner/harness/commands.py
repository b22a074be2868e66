"""Every fused root command of the harness, and how its output is split back into its parts.

A rollout's root steps are few commands, each made of parts (the stop step: the check that the agent is gone,
the OOM count, the workdir's diff, the links removed, the logs packed). Each part starts by printing a marker
line holding a token drawn afresh each time the command is rendered, so nothing the agent chose (a file name,
a link target, a diff, output of its code run by test.sh) can pass for a part's start: the agent cannot know
the token before the command runs, and anything it prints can only come before the real markers of the parts
after it (its processes are dead by then). `Rendered.split` reads the parts from the last one backwards, each
at its marker's last occurrence, so a forged marker can at worst shorten the text of the part it was printed in.

Parts run in order, each only when the one before succeeded (the command's exit status is the first failing
part's); a part that exits the shell ends the command, and the parts after it are absent from the split.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from agentbake.runner.harness.verifier import (
    GUARD_STATUS,
    KILL_THEN_READ_REWARDS,
    PROCESSES,
    READ_REWARDS,
    STUCK,
    UNPACK_TESTS,
    guarded_test_sh,
)
from agentbake.runner.harness.workdir import print_diff_command, restore_command

# Processes of a uid ($1) that are alive (zombies are dead; init reaps them).
_LIVE_PIDS_OF_UID = (
    'for d in /proc/[0-9]*; do [ "$(stat -c %u "$d" 2>/dev/null)" = "$1" ] || continue; '
    'grep -q "^State:[[:space:]]*Z" "$d/status" 2>/dev/null || echo "${d#/proc/}"; done'
)
_ALIVE = f'pids=$({_LIVE_PIDS_OF_UID}) || exit 1; [ -z "$pids" ] || {{ echo "$pids"; exit; }}'
OOM_KILLS = (
    "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null | sed -n 's/^oom_kill //p'"
)
"""The kernel's count of OOM kills in the sandbox's own memory cgroup (namespaced: the container's); v2 then v1."""


@dataclass(frozen=True)
class Part:
    """One part of a fused command: its name (the key of its output in `Rendered.split`) and its shell."""

    name: str
    shell: str


@dataclass(frozen=True)
class Rendered:
    """A command as it is run: its script and the token its markers hold."""

    script: str
    token: str
    names: tuple[str, ...]

    def split(self, stdout: str) -> dict[str, str]:
        """Each part's output by name, for the parts whose marker was printed (those that ran)."""
        parts: dict[str, str] = {}
        rest = stdout
        for name in reversed(self.names):
            before, found, text = rest.rpartition(f"\n{_marker(name, self.token)}\n")
            if found:
                parts[name], rest = text, before
        return parts


@dataclass(frozen=True)
class RootCommand:
    """Parts run in order as one command; `render()` gives its script with fresh markers."""

    parts: tuple[Part, ...] = ()

    def then(self, name: str, shell: str) -> RootCommand:
        return RootCommand((*self.parts, Part(name, shell)))

    def __add__(self, other: RootCommand) -> RootCommand:
        return RootCommand((*self.parts, *other.parts))

    def render(self) -> Rendered:
        token = secrets.token_hex(12)
        script = " &&\n".join(
            f"printf '\\n%s\\n' {_marker(part.name, token)} && {{\n{part.shell}\n}}" for part in self.parts
        )
        return Rendered(script + "\n", token, tuple(part.name for part in self.parts))


def _marker(name: str, token: str) -> str:
    return f"agentbake-{name}-{token}"


# -- the commands -----------------------------------------------------------------------------------


def prepare(private: str, unpack: str, then: RootCommand) -> RootCommand:
    """The first root step: the root-only scratch dir made, root's HOME learned (`home`), the sandbox's own
    processes listed before any task code ran (`processes`: init, the relay, a backend's daemon), the agent's
    files unpacked (the shell `unpack`, in this shell: its variables are unset before `then` runs)."""
    return (
        RootCommand()
        .then("home", f'mkdir -m 700 -- {private} && HOME=~root && export HOME && echo "$HOME"')
        .then("processes", PROCESSES)
        .then("unpack", unpack)
        + then
    )


def snapshot(snapshot_shell: str, user: str) -> RootCommand:
    """The workdir committed (`snapshot_shell`), then the agent's uid (`uid`) and the OOM-kill count (`oom`)."""
    return RootCommand().then("snapshot", snapshot_shell).then("uid", f"id -u {user}").then("oom", OOM_KILLS)


def agent_gone(then: RootCommand) -> RootCommand:
    """$1: the agent's uid. `alive` lists its live pids and ends the command when there are any; else `then`
    runs, in the same exec as the check that found none."""
    return RootCommand().then("alive", _ALIVE) + then


def after_agent(workdir: str, uid: str, diff: str, diff_file: str, clear_the_way: str, pack: str) -> RootCommand:
    """What needs the agent gone ($1: its uid): the OOM-kill count (`oom`), the workdir made again when the agent
    removed or replaced it (`restore`), its diff (`diff`: the diff's own exit status, then the diff itself when
    small), the verifier's way cleared (`links`: what was removed), the agent's logs packed (`pack`)."""
    return (
        RootCommand()
        .then("oom", OOM_KILLS)
        .then("restore", restore_command(workdir, uid))
        .then("diff", f'({diff}); made=$?; echo "$made"\n[ "$made" != 0 ] || {{ {print_diff_command(diff_file)}; }}')
        .then("links", clear_the_way)
        .then("pack", pack)
    )


def root_test_sh(pack: str, python: str | None) -> RootCommand:
    """tests/ unpacked (`unpack`: the shell `$2`, exit 4 when it cannot be), test.sh as root under the subreaper
    wrapper run by `python` (`verifier.guarded_test_sh`) and everything it left stopped and killed (`test.sh`: its
    output), what the wrapper said (`status`: `verifier.guard_from`), the reward files described (`rewards`; exit 3
    when processes kept coming back), the verifier's logs packed (`pack`). $1: the sandbox's own processes."""
    return (
        RootCommand()
        .then("unpack", UNPACK_TESTS)
        .then("test.sh", f"{guarded_test_sh(python)}:")  # whatever test.sh and the kill did, the status part runs
        .then("status", GUARD_STATUS)
        .then("rewards", STUCK + READ_REWARDS)
        .then("pack", pack)
    )


def user_test_sh(python: str | None) -> RootCommand:
    """The same for a test.sh run as another user (`[verifier] user`), as that user: test.sh under the wrapper (a
    subreaper needs no privilege) and what it left stopped and killed (`test.sh`), what the wrapper said (`status`).
    $1: the sandbox's own processes."""
    return RootCommand().then("test.sh", f"{guarded_test_sh(python)}:").then("status", GUARD_STATUS)


def kill_then_read(pack: str) -> RootCommand:
    """After a test.sh of another user, or one cut short: what is left killed and the reward files described
    (`rewards`: also the pids it found alive, `verifier.survivors`), the verifier's logs packed (`pack`). $1: the
    sandbox's own processes."""
    return RootCommand().then("rewards", KILL_THEN_READ_REWARDS).then("pack", pack)
