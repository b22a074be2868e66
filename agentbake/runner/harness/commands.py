"""The harness's fused root commands, and how their output splits back into parts.

Each part starts with a marker line holding a token drawn afresh per render, so nothing the agent wrote can pass for
a part's start. `Rendered.split` reads parts from the last one backwards: a forged marker can at worst shorten the
part it was printed in. Parts run in order, each only when the one before succeeded.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from agentbake.runner.harness.listeners import LISTENING
from agentbake.runner.harness.toolchain import baseline_part
from agentbake.runner.harness.verifier import (
    GUARD_STATUS,
    KEEP_OWN,
    KILL_THE_REST,
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
# With the agent's services kept: its live processes that are not stopped (`listeners.KEEP_SERVICES` stopped its
# services), and the stopped ones as `pid comm`.
_EACH_LIVE_OF_UID = (
    'for d in /proc/[0-9]*; do [ "$(stat -c %u "$d" 2>/dev/null)" = "$1" ] || continue; s=; '
    'while read -r k s _; do [ "$k" = State: ] && break; done < "$d/status" 2>/dev/null; p=${{d#/proc/}}; {body}; done'
)
_UNSTOPPED = _EACH_LIVE_OF_UID.format(body='case $s in Z|T|t|"") ;; *) echo "$p" ;; esac')
_ALIVE_BUT_STOPPED = f'pids=$({_UNSTOPPED}) || exit 1; [ -z "$pids" ] || {{ echo "$pids"; exit; }}'
_STOPPED = _EACH_LIVE_OF_UID.format(
    body='case $s in T|t) read -r c 2>/dev/null < "$d/comm" && printf "%s %s\\n" "$p" "$c" ;; esac'
)
# A root agent's processes are root's like the sandbox's own: every process but those ($2) and this command's
# chain is stopped at once (one system call: a fork loop freezes), killed, the kept ones continued; what kept
# coming back is listed and ends the command. $1 (the agent's uid) is kept for the parts after it.
_ROOT_ALIVE = f"""agent=$1; set -- "$2"
{KEEP_OWN}kill -STOP -1 2>/dev/null
{KILL_THE_REST}for p in $keep; do kill -CONT "${{p%:*}}" 2>/dev/null; done
set -- "$agent"; [ -z "$stuck" ] || {{ echo $stuck; exit; }}"""
# A root agent's, its services kept: as `_ROOT_ALIVE`, but the processes holding a listening socket (root sees
# every root process's descriptors: `listeners.LISTENING`) are kept too and left stopped; `$listening` stays set
# for `_ROOT_SERVICE_PORTS`.
_ROOT_ALIVE_BUT_SERVICES = f"""agent=$1; set -- "$2"
{KEEP_OWN}own_keep=$keep
kill -STOP -1 2>/dev/null
{LISTENING}for l in $listening; do
  p=${{l%%:*}}; read -r s 2>/dev/null < /proc/$p/stat || continue; s=${{s##*) }}; set -- $s; keep="$keep$p:${{20}} "
done
{KILL_THE_REST}for p in $own_keep; do kill -CONT "${{p%:*}}" 2>/dev/null; done
set -- "$agent"; [ -z "$stuck" ] || {{ echo $stuck; exit; }}"""
_ROOT_SERVICE_PORTS = 'for l in $listening; do printf "%s %s\\n" "${l%%:*}" "${l#*:}"; done'
# Touches the marker and prints its ctime to the nanosecond (what the sandbox made in the same second before it,
# as the engine's own /dev links, is older); a stat without `%.9Z` gives whole seconds, which counts that second in.
_STARTED = (
    "touch {marker} && s=$(stat -c %.9Z {marker} 2>/dev/null); "
    'case $s in *.*) echo "$s" ;; *) stat -c %Z {marker} ;; esac'
)
AGENT_STARTED = "agent-started"
"""In the scratch dir: touched by the last root step before the agent starts. What changed after it (a link's
ctime, which no process can set back) is the agent's whoever owns it: a root agent's files are root's too."""
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


ROOT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
"""The environment of every root step, before root's HOME is learned: no user or system git config, so nothing
the agent writes can configure the root-run git."""


def scratch_name() -> str:
    """A fresh name for the root-only scratch dir, chosen before any task code runs there."""
    return f"/tmp/agentbake-{secrets.token_hex(8)}"


def _scratch_and_home(private: str) -> str:
    """The root-only scratch dir made (it fails when anything is in its way), root's HOME exported and printed."""
    return f'mkdir -m 700 -- {private} && HOME=~root && export HOME && echo "$HOME"'


# -- the commands -----------------------------------------------------------------------------------


def prepare(private: str, unpack: str, then: RootCommand) -> RootCommand:
    """The first root step: scratch dir made, root's HOME (`home`), the sandbox's own processes (`processes`), the
    agent's files unpacked by `unpack`."""
    return (
        RootCommand().then("home", _scratch_and_home(private)).then("processes", PROCESSES).then("unpack", unpack)
        + then
    )


def own_verifier(private: str, clear_the_way: str) -> RootCommand:
    """The first root step in a verifier's own sandbox: scratch dir, `home`, `processes`, then the verifier's way
    cleared (`links`)."""
    return (
        RootCommand().then("home", _scratch_and_home(private)).then("processes", PROCESSES).then("links", clear_the_way)
    )


def snapshot(snapshot_shell: str, user: str, private: str) -> RootCommand:
    """The workdir committed, then the agent's `uid`, the OOM count (`oom`), the toolchain baseline (`toolchain`) and,
    last, the agent's start time (`started`)."""
    return (
        RootCommand()
        .then("snapshot", snapshot_shell)
        .then("uid", f"id -u {user}")
        .then("oom", OOM_KILLS)
        .then("toolchain", baseline_part(private))
        .then("started", _STARTED.format(marker=f"{private}/{AGENT_STARTED}"))
    )


def agent_gone(then: RootCommand, *, root: bool = False, keep_services: bool = False) -> RootCommand:
    """$1: the agent's uid. `alive` lists its live pids and ends the command if any; else `then` runs in the same exec.
    `root`: kill everything but $2 (the sandbox's own processes) first. `keep_services`: stopped listeners do not
    count; `services` and `ports` list them."""
    if not keep_services:
        return RootCommand().then("alive", _ROOT_ALIVE if root else _ALIVE) + then
    if root:
        command = RootCommand().then("alive", _ROOT_ALIVE_BUT_SERVICES).then("ports", _ROOT_SERVICE_PORTS)
    else:
        command = RootCommand().then("alive", _ALIVE_BUT_STOPPED)
    return command.then("services", _STOPPED) + then


def continue_services(pids: str) -> str:
    """The agent's services stopped by `agent_gone(keep_services=True)` continued (pids space-separated)."""
    return f"kill -CONT {pids} 2>/dev/null; :"


def after_agent(
    workdir: str, uid: str, diff: str, diff_file: str, toolchain: str, clear_the_way: str, pack: str
) -> RootCommand:
    """What needs the agent gone ($1: its uid): OOM count (`oom`), workdir restored (`restore`), its diff (`diff`),
    toolchain check (`toolchain`), verifier's way cleared (`links`), logs packed (`pack`)."""
    return (
        RootCommand()
        .then("oom", OOM_KILLS)
        .then("restore", restore_command(workdir, uid))
        .then("diff", f'({diff}); made=$?; echo "$made"\n[ "$made" != 0 ] || {{ {print_diff_command(diff_file)}; }}')
        .then("toolchain", toolchain)
        .then("links", clear_the_way)
        .then("pack", pack)
    )


def root_test_sh(pack: str, python: str | None) -> RootCommand:
    """tests/ unpacked, test.sh as root under the subreaper guard with all it left killed (`test.sh`), the guard's
    verdict (`status`), the reward files (`rewards`), the logs packed (`pack`). $1: the sandbox's processes."""
    return (
        RootCommand()
        .then("unpack", UNPACK_TESTS)
        .then("test.sh", f"{guarded_test_sh(python)}:")  # whatever test.sh and the kill did, the status part runs
        .then("status", GUARD_STATUS)
        .then("rewards", STUCK + READ_REWARDS)
        .then("pack", pack)
    )


def user_test_sh(python: str | None) -> RootCommand:
    """As `root_test_sh`, for a test.sh run as `[verifier] user`: `test.sh` and `status`."""
    return RootCommand().then("test.sh", f"{guarded_test_sh(python)}:").then("status", GUARD_STATUS)


def kill_then_read(pack: str) -> RootCommand:
    """After a test.sh of another user, or one cut short: what is left killed and the reward files described
    (`rewards`: also the pids it found alive, `verifier.survivors`), the verifier's logs packed (`pack`). $1: the
    sandbox's own processes."""
    return RootCommand().then("rewards", KILL_THEN_READ_REWARDS).then("pack", pack)


def printed_count(printed: str) -> int:
    """The sum of the counts a command printed (the OOM kills of cgroup v2 and v1, whichever exist)."""
    return sum(int(n) for n in printed.split() if n.isdigit())
