"""The steps before the agent: its files uploaded, environment/setup.sh as root, the workdir's snapshot."""

from __future__ import annotations

import posixpath
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.runner.harness import commands, toolchain
from agentbake.runner.harness.commands import RootCommand, printed_count
from agentbake.runner.harness.upload import USER_UMASK_MODES, hand_over, made_in_user_dirs, tar_archive, unpack_command
from agentbake.runner.harness.verifier_phase import tail
from agentbake.runner.harness.workdir import snapshot_command
from agentbake.runner.result import Status

if TYPE_CHECKING:
    from agentbake.runner.harness.steps import Harness

SETUP_TIMEOUT_SEC = 600.0
"""Seconds `environment/setup.sh` may run (Harbor's default build/setup budget)."""
HARBOR_SOLUTION_DIR = "/solution"
"""Where the oracle finds the task's solution/ (Harbor's path): root's, readable by every user."""
_MADE = "upload-made"  # in the scratch dir: what the upload makes in the user's dirs (`upload.made_in_user_dirs`)


def upload_agent_files(h: Harness) -> None:
    """Pack the task's environment, the launch's files, the oracle's solution and setup.sh into one archive. The first
    root step unpacks it (`upload.hand_over`)."""
    task, home = h.task, h.handle.home
    files: dict[str, bytes | Path] = {}
    if task.environment_dir is not None:
        files |= {posixpath.join(h.workdir, r.as_posix()): task.environment_dir / r for r in task.environment_files}
    if h.oracle:
        assert task.solution_script is not None, "the runner checks this before creating the sandbox"
        solution = task.solution_script.parent
        files |= {
            posixpath.join(HARBOR_SOLUTION_DIR, p.relative_to(solution).as_posix()): p
            for p in solution.rglob("*")
            if p.is_file()
        }
    files |= {posixpath.join(home, rel): text.encode() for rel, text in h.launch.files.items()}
    made = made_in_user_dirs(files, (home, h.workdir, *h.handle.paths.values()))
    files[f"{h.private}/{_MADE}"] = made.encode()  # root's alone, in the scratch dir, like setup.sh
    if task.setup_script is not None:
        files[f"{h.private}/setup.sh"] = task.setup_script
    archive = tar_archive(files, mode_mask=USER_UMASK_MODES)
    h.upload = hand_over(h.handle, archive, f"{h.private}.tar", in_env=h.archives_in_env)


def prepare(h: Harness, then: RootCommand, *, what: str) -> dict[str, str]:
    """The first root step (`commands.prepare`): make the scratch dir, learn root's HOME and the sandbox's own
    processes, unpack the agent's files, then run `then` in the same exec. Returns what each part printed."""
    assert h.upload is not None, "upload_agent_files comes first"
    unpack = unpack_command(h.upload, f"{h.private}/{_MADE}", h.handle.user)
    if h.oracle:  # root's (outside the user's dirs), readable by an agent of any user
        unpack += f" && chmod -R a+rX {HARBOR_SOLUTION_DIR}"
    printed = h.run_root(
        commands.prepare(h.private, unpack, then),
        what=what,
        envs=h.upload.envs,  # this command's alone: `unpack` unsets them before `then` runs
    )
    h.root_env["HOME"] = printed["home"].strip()
    h.own_processes = " ".join(printed["processes"].split())
    return printed


def setup(h: Harness) -> bool:
    if h.task.setup_script is None:
        return True
    prepare(h, RootCommand(), what="create the harness's scratch dir")
    script = f"{h.private}/setup.sh"  # unpacked there by prepare
    result = h.handle.exec(
        ["bash", script],
        envs={**h.task.environment_env, **h.root_env},
        cwd=h.workdir,
        timeout=SETUP_TIMEOUT_SEC,
        user="root",
    )
    h.save("setup.log", result.stdout + result.stderr)
    if result.timed_out:
        h.outcome.fail(Status.SETUP_ERROR, f"environment/setup.sh ran past {SETUP_TIMEOUT_SEC:.0f} s")
    elif result.exit_code != 0:
        said = tail(result.stderr or result.stdout)
        h.outcome.fail(Status.SETUP_ERROR, f"environment/setup.sh exited {result.exit_code}: {said}")
    return h.outcome.status is Status.OK


def snapshot(h: Harness) -> bool:
    """Commit the workdir as the agent will find it, for the diff afterwards. The same exec reads the agent's uid and
    the OOM count, and makes the scratch dir when no setup.sh did."""
    command = commands.snapshot(
        snapshot_command(h.private, h.workdir, h.handle.git), shlex.quote(h.handle.user), h.private
    )
    if "HOME" in h.root_env:
        printed = h.run_root(command, what="snapshot the workdir")
    else:
        printed = prepare(h, command, what="snapshot the workdir")
    h.agent_uid = printed["uid"].strip()
    h.oom_before = printed_count(printed["oom"])
    h.toolchain = toolchain.parse_baseline(printed["toolchain"])
    h.agent_started = h.packed.since = f"@{printed['started'].strip()}"
    return True
