"""The steps once the agent ends: its processes stopped, its exit and toolchain changes judged, the diff."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from agentbake.errors import SandboxError
from agentbake.runner.harness import commands, toolchain
from agentbake.runner.harness.agent_phase import stop_user
from agentbake.runner.harness.commands import printed_count
from agentbake.runner.harness.listeners import parse_services
from agentbake.runner.harness.verifier import PROCESSES
from agentbake.runner.harness.verifier_phase import clear_the_way, note_removed_links, tail
from agentbake.runner.harness.workdir import RECREATED, diff_command, printed_diff
from agentbake.runner.result import Status

if TYPE_CHECKING:
    from agentbake.runner.harness.steps import Harness


def stop_agent_user(h: Harness) -> None:
    """Stop every process of the agent's user, then, in the exec that finds none left, run the after-agent parts
    (`commands.after_agent`): OOM count, workdir restored and diffed, verifier's way cleared, logs packed."""
    agent_logs = h.launch.log_paths
    then = commands.after_agent(
        h.workdir,
        h.agent_uid,
        diff=f"cd {shlex.quote(h.workdir)} && {diff_command_of(h)}",
        diff_file=diff_file(h),
        toolchain=_toolchain_check(h),
        clear_the_way=clear_the_way(h.private, since=h.agent_started),
        pack=h.packed.pack(agent_logs),
    )
    oom_kills = h.oom_before  # unknown when the agent cannot be stopped: judged as none
    try:
        # An agent that ended on its own killed its leftovers (not its services) as it exited: the first look.
        stopped = stop_user(
            h.handle,
            h.agent_uid,
            h.root_env,
            then,
            own=h.own_processes,
            killed=h.agent_exit is not None,
            keep_services=h.verifier_mode == "shared" and h.backend is not None,
        )
        printed = stopped.printed
        oom_kills = printed_count(printed["oom"])
    finally:
        judge_agent_exit(h, oom_kills)
    h.packed.take(printed.get("pack"), agent_logs)
    h.services = parse_services(printed.get("services", ""), printed.get("ports", ""))
    note_removed_links(printed.get("links", ""), h.outcome, h.save)
    _judge_toolchain(h, printed.get("toolchain"))
    if h.agent_uid == "0" and h.verifier_mode == "shared" and not h.toolchain_changed:
        _judge_harness_tools(h)
    if stopped.restarted:
        h.outcome.notes.append(stopped.restarted)
        # init and the relay started anew: they are the processes that outlive test.sh now
        listed = h.root(["sh", "-c", PROCESSES], what="list the sandbox's processes", cwd="/")
        h.own_processes = " ".join(listed.stdout.split())
    if RECREATED in printed["restore"]:
        h.outcome.notes.append(f"the agent removed or replaced the workdir {h.workdir}: made again, empty")
    made, _, inline = printed["diff"].partition("\n")
    if inline.startswith("inline "):
        h.diff = printed_diff(inline.strip())
    h.diff_exit = made.strip()


def judge_agent_exit(h: Harness, oom_kills: int) -> None:
    """`oom` when the cgroup counted OOM kills since the snapshot, else `agent_error` on a non-zero exit."""
    result, h.agent_exit = h.agent_exit, None
    if result is None:
        return
    if oom_kills > h.oom_before:
        h.outcome.fail(Status.OOM, f"the sandbox ran out of memory (agent exit {result.exit_code})")
    elif result.exit_code != 0:
        detail = tail(result.stderr or result.stdout)
        h.outcome.fail(Status.AGENT_ERROR, f"the agent exited {result.exit_code}: {detail}")


def _toolchain_check(h: Harness) -> str:
    """The stop step's toolchain check. Separate mode needs none: its verifier runs in a fresh sandbox."""
    if h.verifier_mode == "separate":
        return ":"
    if isinstance(h.toolchain, toolchain.Baseline):
        return toolchain.check_part(h.private, h.toolchain)
    return toolchain.unchecked_part(h.toolchain)


def _judge_toolchain(h: Harness, printed: str | None) -> None:
    """Withhold the reward and skip the verifier when the agent changed the verifier's toolchain: test.sh would run the
    agent's code as root."""
    if printed is None or h.verifier_mode == "separate":  # None: the stop step failed, the rollout with it
        return
    verdict = toolchain.judge(printed, root_agent=h.agent_uid == "0")
    if verdict.listing:
        h.save("verifier/toolchain.txt", verdict.listing)
    if verdict.note:
        h.outcome.notes.append(verdict.note)
    if verdict.withheld:
        h.toolchain_changed = True
        h.outcome.fail(Status.VERIFIER_ERROR, verdict.withheld, decisive=True)


def _judge_harness_tools(h: Harness) -> None:
    """Withhold the reward when a root agent changed what the harness's own steps run on (`awk`, `sh`, the loader). The
    engine's list of changed files is asked: nothing in the sandbox can forge it."""
    changed = h.handle.changed_files()
    if changed is None:
        return
    names = _image_commands(h) if toolchain.adds_commands(changed) else frozenset()
    links = {folder: h.handle.link_target(folder) for folder in toolchain.folders_changed(changed)}
    found = toolchain.harness_tools_changed(changed, names, links)
    if found:
        h.save("verifier/harness-tools.txt", "".join(f"{line}\n" for line in found))
        h.toolchain_changed = True
        h.outcome.fail(Status.VERIFIER_ERROR, toolchain.describe_harness_tools(found), decisive=True)


def _image_commands(h: Harness) -> frozenset[str] | None:
    """The command names the image had on PATH, from the snapshot's list. None when its md5 differs from the one the
    harness kept."""
    if not isinstance(h.toolchain, toolchain.Baseline):
        return None
    try:
        listed = h.handle.read_bytes(f"{h.private}/toolchain-baseline")
        named = h.handle.read_bytes(f"{h.private}/toolchain-named")
    except (OSError, SandboxError):
        return None
    return toolchain.image_commands(listed, named, h.toolchain)


def save_diff(h: Harness) -> None:
    """Save the workdir diff the stop step made. When the stop step could not make it, make it now: the diff is kept
    whatever the agent did."""
    if h.diff_exit == "not run":
        h.root(diff_command_of(h), what="diff the workdir")
    elif h.diff_exit != "0":
        raise SandboxError(f"could not diff the workdir in sandbox {h.handle.sandbox_id}: exit {h.diff_exit}")
    diff = h.diff if h.diff is not None else h.handle.read_bytes(diff_file(h))
    h.save_bytes("workdir.diff", diff)


def diff_file(h: Harness) -> str:
    return f"{h.private}/workdir.diff"


def diff_command_of(h: Harness) -> str:
    """The workdir's diff against the snapshot into the scratch dir (run in the workdir)."""
    return diff_command(h.private, h.workdir, diff_file(h), h.handle.git)
