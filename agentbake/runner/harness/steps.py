"""The steps of one rollout inside a sandbox, identical for every agent and every backend.

copy the task's environment into the workdir -> setup.sh as root -> snapshot the workdir -> the agent
(headless, instruction on stdin) until it exits or its timeout -> stop every process of the agent's user
-> diff the workdir -> only now upload tests/ and create the verifier's log dir fresh, root-owned ->
tests/test.sh as root -> reward -> collect logs.

The order is the tamper-proofing: nothing the agent started is alive when the verifier's files appear,
and the reward is read only from a directory created after that, so no reward file can predate the
verifier run. Root steps run with root's own HOME and no user git config, so nothing the agent planted
in its home (a `.gitconfig`, Python's user site) runs as root.
"""

from __future__ import annotations

import functools
import logging
import posixpath
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.errors import SandboxError
from agentbake.runner.agents import AgentImage, AgentLaunch, headless_launch
from agentbake.runner.choices import VerifierMode
from agentbake.runner.harness import commands, own_verifier, toolchain
from agentbake.runner.harness.agent_phase import STEP_TIMEOUT_SEC, run_agent, stop_user
from agentbake.runner.harness.commands import RootCommand
from agentbake.runner.harness.listeners import Service, parse_services
from agentbake.runner.harness.outcome import HarnessOutcome, describe_error
from agentbake.runner.harness.own_verifier import VerifierPlace
from agentbake.runner.harness.upload import (
    USER_UMASK_MODES,
    HandedArchive,
    hand_over,
    made_in_user_dirs,
    tar_archive,
    unpack_command,
)
from agentbake.runner.harness.verifier import HARBOR_VERIFIER_LOGS, PROCESSES
from agentbake.runner.harness.verifier_phase import (
    VerifierNetwork,
    VerifierPhase,
    clear_the_way,
    note_removed_links,
    tail,
)
from agentbake.runner.harness.workdir import (
    RECREATED,
    diff_command,
    printed_diff,
    snapshot_command,
)
from agentbake.runner.result import Status, Timings
from agentbake.runner.sandbox import ExecResult, SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.runner.sandbox.copyout import CopyBudget
from agentbake.runner.sandbox.packed import PackedLogs
from agentbake.tasks import Task

if TYPE_CHECKING:
    from agentbake.runner.network import RolloutEgress

logger = logging.getLogger("agentbake.runner")


SETUP_TIMEOUT_SEC = 600.0
"""Seconds `environment/setup.sh` may run (Harbor's default build/setup budget)."""
HARBOR_SOLUTION_DIR = "/solution"
"""Where the oracle finds the task's solution/ (Harbor's path): root's, readable by every user."""
_MADE = "upload-made"  # in the scratch dir: what the upload makes in the user's dirs (`upload.made_in_user_dirs`)


def oracle_launch(task: Task, image: AgentImage) -> AgentLaunch:
    """The reference solution in place of an agent: `solution/solve.sh` (uploaded to /solution, as Harbor's oracle
    has it) as the agent's user with `[solution] env`, run like an agent (instruction on stdin, in the workdir,
    logs in the agent-log dir), no model."""
    solve = posixpath.join(HARBOR_SOLUTION_DIR, "solve.sh")
    return headless_launch(image, "oracle", ["bash", solve], task.instruction, env=task.solution_env)


class Harness:
    """Runs the steps against one sandbox; `run()` returns the outcome and never kills the sandbox."""

    def __init__(
        self,
        handle: SandboxHandle,
        task: Task,
        launch: AgentLaunch,
        out_dir: Path,
        timings: Timings,
        *,
        oracle: bool = False,
        verifier_network: VerifierNetwork = "none",
        archives_in_env: bool = False,
        egress: RolloutEgress | None = None,
        verifier_mode: VerifierMode = "shared",
        backend: SandboxBackend | None = None,
        verifier_request: SandboxRequest | None = None,
    ) -> None:
        self.handle, self.task, self.launch, self.out_dir, self.timings = handle, task, launch, out_dir, timings
        self.oracle = oracle
        self.verifier_network = verifier_network
        self.egress = egress  # the rollout's egress proxy: the verifier step switches it to its phase
        self.archives_in_env = archives_in_env  # `Capabilities.large_exec_env`: see `upload.hand_over`
        # The verifier's own sandbox (`own_verifier.py`): `backend` makes it (one with `Capabilities.verifier_sandbox`,
        # else None: then no service is kept and separate mode is refused by the runner), `verifier_request` is the
        # fresh one's of separate mode.
        self.verifier_mode, self.backend, self.verifier_request = verifier_mode, backend, verifier_request
        self.services: list[Service] = []  # the agent's, kept alive (frozen) by the stop step in shared mode
        self.place: VerifierPlace | None = None  # where the verifier ran, once it did
        self.workdir = handle.paths["workdir"]
        self.outcome = HarnessOutcome()
        # The root-only scratch dir (setup script, snapshot, test files), made by the first root step. Its name is
        # chosen here: nothing of the agent has run yet, so nothing can stand in its way (mkdir fails if it does).
        self.private = commands.scratch_name()
        self.root_env = dict(commands.ROOT_ENV)  # HOME (root's own) is added by the first root step
        self.agent_uid = ""  # read by _snapshot, with the OOM-kill count before the agent starts
        self.oom_before = 0
        self.upload: HandedArchive | None = None  # the agent's files, unpacked by the first root step
        self.agent_exit: ExecResult | None = None  # how the agent exited, judged once it is stopped
        self.diff_exit = "not run"  # of the diff the stop step makes
        self.diff: bytes | None = None  # the diff as the stop step printed it (a small one), else read from its file
        self.own_processes = ""  # the sandbox's processes before any task code ran (`pid:starttime ...`)
        # Log paths packed by the stop step and the verifier, for _collect; a link changed after the agent started
        # is the agent's whoever owns it (a root agent's are root's).
        self.packed = PackedLogs(self.private)  # log paths packed by the stop step and the verifier, for _collect
        self.agent_started = "@0"  # `@<seconds>`: the ctime the snapshot step's last part printed
        self.toolchain: toolchain.Baseline | str = "the snapshot did not run"  # recorded right before the agent
        self.toolchain_changed = False  # the stop step found the verifier's toolchain changed: no verifier

    def run(self) -> HarnessOutcome:
        """The steps in order. Once the agent has started, a step that raises ends as `sandbox_error` with its
        message (the first failure is the status) and the later steps still run where they can: the diff and
        the logs are collected whatever the agent did to its sandbox; the verifier runs only when every process
        of the agent's user is gone."""
        with self.timings.phase("upload"):
            self._upload_agent_files()
        with self.timings.phase("setup"):
            setup_ok = self._setup() and self._snapshot()
        if setup_ok:
            with self.timings.phase("agent"):
                self._step(self._run_agent, "the agent's run")
            with self.timings.phase("stop"):
                # Decisive: with the agent's processes alive (or the sandbox lost) no verifier runs.
                stopped = self._step(self._stop_agent_user, "stopping the agent", decisive=True)
            with self.timings.phase("collect"):
                self._step(self._save_diff, "the workdir diff")  # made by the stop step's exec
            if stopped and not self.toolchain_changed:
                with self.timings.phase("verifier_sandbox"):
                    placed = self._step(self._place_verifier, "making the verifier's own sandbox")
                if placed:
                    with self.timings.phase("verifier"):
                        self._step(self._verify, "the verifier")
        try:
            with self.timings.phase("collect"):
                self._collect()
        finally:
            if self.place is not None and self.place.own:
                with self.timings.phase("teardown"):
                    self._step(self.place.handle.kill, "removing the verifier's sandbox")
        return self.outcome

    def _step(self, step: Callable[[], None], what: str, *, decisive: bool = False) -> bool:
        """Run one step; an exception (any: one rollout's failure must never end the batch) becomes the
        outcome's failure (`decisive`: see `HarnessOutcome.fail`). Returns whether the step completed."""
        try:
            step()
        except Exception as exc:
            if not isinstance(exc, SandboxError):
                logger.exception("sandbox %s: %s failed", self.handle.sandbox_id, what)
            self.outcome.fail(Status.SANDBOX_ERROR, f"{what} failed: {describe_error(exc)}", decisive=decisive)
            return False
        return True

    # -- steps ------------------------------------------------------------------------------------

    def _prepare(self, then: RootCommand, *, what: str) -> dict[str, str]:
        """The first root step (`commands.prepare`): make the scratch dir, learn root's HOME (then in `root_env` for
        every later root step) and the sandbox's own processes (init, the relay, a backend's daemon: nothing of the
        task has run yet; they are the only ones that outlive test.sh), unpack the agent's files, then run `then`
        in the same exec with that HOME; returns what each part printed."""
        assert self.upload is not None, "_upload_agent_files comes first"
        unpack = unpack_command(self.upload, f"{self.private}/{_MADE}", self.handle.user)
        if self.oracle:  # root's (outside the user's dirs), readable by an agent of any user
            unpack += f" && chmod -R a+rX {HARBOR_SOLUTION_DIR}"
        printed = self._run(
            commands.prepare(self.private, unpack, then),
            what=what,
            envs=self.upload.envs,  # this command's alone: `unpack` unsets them before `then` runs
        )
        self.root_env["HOME"] = printed["home"].strip()
        self.own_processes = " ".join(printed["processes"].split())
        return printed

    def _upload_agent_files(self) -> None:
        """Environment files into the workdir, the launch's files (config, instruction) under home, for the
        oracle the solution folder at /solution, and setup.sh into the scratch dir: one archive, written
        for the first root step, which unpacks it (`upload.py`): in that step's environment when small enough
        (`upload.hand_over`), else written as root beside the scratch dir first."""
        task, home = self.task, self.handle.home
        files: dict[str, bytes | Path] = {}
        if task.environment_dir is not None:
            files |= {
                posixpath.join(self.workdir, r.as_posix()): task.environment_dir / r for r in task.environment_files
            }
        if self.oracle:
            assert task.solution_script is not None, "the runner checks this before creating the sandbox"
            solution = task.solution_script.parent
            files |= {
                posixpath.join(HARBOR_SOLUTION_DIR, p.relative_to(solution).as_posix()): p
                for p in solution.rglob("*")
                if p.is_file()
            }
        files |= {posixpath.join(home, rel): text.encode() for rel, text in self.launch.files.items()}
        made = made_in_user_dirs(files, (home, self.workdir, *self.handle.paths.values()))
        files[f"{self.private}/{_MADE}"] = made.encode()  # root's alone, in the scratch dir, like setup.sh
        if task.setup_script is not None:
            files[f"{self.private}/setup.sh"] = task.setup_script
        archive = tar_archive(files, mode_mask=USER_UMASK_MODES)
        self.upload = hand_over(self.handle, archive, f"{self.private}.tar", in_env=self.archives_in_env)

    def _setup(self) -> bool:
        if self.task.setup_script is None:
            return True
        self._prepare(RootCommand(), what="create the harness's scratch dir")
        script = f"{self.private}/setup.sh"  # unpacked there by _prepare
        result = self.handle.exec(
            ["bash", script],
            envs={**self.task.environment_env, **self.root_env},
            cwd=self.workdir,
            timeout=SETUP_TIMEOUT_SEC,
            user="root",
        )
        self._save("setup.log", result.stdout + result.stderr)
        if result.timed_out:
            self.outcome.fail(Status.SETUP_ERROR, f"environment/setup.sh ran past {SETUP_TIMEOUT_SEC:.0f} s")
        elif result.exit_code != 0:
            said = tail(result.stderr or result.stdout)
            self.outcome.fail(Status.SETUP_ERROR, f"environment/setup.sh exited {result.exit_code}: {said}")
        return self.outcome.status is Status.OK

    def _snapshot(self) -> bool:
        """Commit the workdir as the agent will find it into a root-only git dir, for the diff afterwards;
        the same call reads the agent's uid and the OOM-kill count so far, and makes the scratch dir when no
        setup.sh did (one round trip instead of three)."""
        snapshot = commands.snapshot(
            snapshot_command(self.private, self.workdir, self.handle.git), shlex.quote(self.handle.user), self.private
        )
        if "HOME" in self.root_env:
            printed = self._run(snapshot, what="snapshot the workdir")
        else:
            printed = self._prepare(snapshot, what="snapshot the workdir")
        self.agent_uid = printed["uid"].strip()
        self.oom_before = _count(printed["oom"])
        self.toolchain = toolchain.parse_baseline(printed["toolchain"])
        self.agent_started = self.packed.since = f"@{printed['started'].strip()}"
        return True

    def _run_agent(self) -> None:
        end = run_agent(
            self.handle, self.launch, self.workdir, self.task.agent_timeout_sec, lambda: self.timings.mark("ready")
        )
        if end.result is None:
            self.outcome.fail(end.stopped or Status.SANDBOX_ERROR, end.reason)
            return
        result = end.result
        self.outcome.exit_code = result.exit_code
        if end.stopped is not None:
            self.outcome.fail(end.stopped, end.reason)
        else:
            self.agent_exit = result  # judged by the stop step, which reads the OOM count once the agent is gone

    def _judge_agent_exit(self, oom_kills: int) -> None:
        """`oom` when the sandbox's cgroup counted OOM kills since the snapshot, else `agent_error` on a non-zero
        exit (after the agent's timeout or disk limit, which `_run_agent` records first)."""
        result, self.agent_exit = self.agent_exit, None
        if result is None:
            return
        if oom_kills > self.oom_before:
            self.outcome.fail(Status.OOM, f"the sandbox ran out of memory (agent exit {result.exit_code})")
        elif result.exit_code != 0:
            detail = tail(result.stderr or result.stdout)
            self.outcome.fail(Status.AGENT_ERROR, f"the agent exited {result.exit_code}: {detail}")

    def _stop_agent_user(self) -> None:
        """Every process of the agent's user killed (`agent_phase.stop_user`, a restart of the sandbox when it
        must); in the exec that finds none left: the OOM-kill count (v2 `memory.events`, v1 `memory.oom_control`),
        the workdir checked (one the agent removed or replaced, by a file or by a link that git and the verifier
        would follow, is made again, empty: the diff then shows what was lost, and the verifier gets its cwd),
        the workdir diffed into the scratch dir (its exit is printed, so a failed diff stays the diff's failure;
        a small diff is printed too, `workdir.print_diff_command`, so `_save_diff` reads no file), and last the
        verifier's way cleared (`verifier_phase.clear_the_way`: the agent's links into /tests or /logs removed,
        both made fresh); then the agent's log paths, final now, packed for `_collect` (`PackedLogs`)."""
        agent_logs = self.launch.log_paths
        then = commands.after_agent(
            self.workdir,
            self.agent_uid,
            diff=f"cd {shlex.quote(self.workdir)} && {self._diff_command}",
            diff_file=self._diff_file,
            toolchain=self._toolchain_check(),
            clear_the_way=clear_the_way(self.private, since=self.agent_started),
            pack=self.packed.pack(agent_logs),
        )
        oom_kills = self.oom_before  # unknown when the agent cannot be stopped: judged as none
        try:
            # An agent that ended on its own killed its leftovers (not its services) as it exited: the first look.
            stopped = stop_user(
                self.handle,
                self.agent_uid,
                self.root_env,
                then,
                own=self.own_processes,
                killed=self.agent_exit is not None,
                keep_services=self.verifier_mode == "shared" and self.backend is not None,
            )
            printed = stopped.printed
            oom_kills = _count(printed["oom"])
        finally:
            self._judge_agent_exit(oom_kills)
        self.packed.take(printed.get("pack"), agent_logs)
        self.services = parse_services(printed.get("services", ""), printed.get("ports", ""))
        note_removed_links(printed.get("links", ""), self.outcome, self._save)
        self._judge_toolchain(printed.get("toolchain"))
        if self.agent_uid == "0" and self.verifier_mode == "shared" and not self.toolchain_changed:
            self._judge_harness_tools()
        if stopped.restarted:
            self.outcome.notes.append(stopped.restarted)
            # init and the relay started anew: they are the processes that outlive test.sh now
            listed = self._root(["sh", "-c", PROCESSES], what="list the sandbox's processes", cwd="/")
            self.own_processes = " ".join(listed.stdout.split())
        if RECREATED in printed["restore"]:
            self.outcome.notes.append(f"the agent removed or replaced the workdir {self.workdir}: made again, empty")
        made, _, inline = printed["diff"].partition("\n")
        if inline.startswith("inline "):
            self.diff = printed_diff(inline.strip())
        self.diff_exit = made.strip()

    def _toolchain_check(self) -> str:
        """The stop step's check of the verifier's toolchain; none in separate mode, whose verifier runs in a fresh
        sandbox of the image, where nothing the agent changed exists."""
        if self.verifier_mode == "separate":
            return ":"
        if isinstance(self.toolchain, toolchain.Baseline):
            return toolchain.check_part(self.private, self.toolchain)
        return toolchain.unchecked_part(self.toolchain)

    def _judge_toolchain(self, printed: str | None) -> None:
        """Withhold the reward, and skip the verifier, when the stop step found the verifier's toolchain changed
        (`toolchain.judge`): test.sh would run the agent's code as root, so its reward could be anything."""
        if printed is None or self.verifier_mode == "separate":  # None: the stop step failed, the rollout with it
            return
        verdict = toolchain.judge(printed, root_agent=self.agent_uid == "0")
        if verdict.listing:
            self._save("verifier/toolchain.txt", verdict.listing)
        if verdict.note:
            self.outcome.notes.append(verdict.note)
        if verdict.withheld:
            self.toolchain_changed = True
            self.outcome.fail(Status.VERIFIER_ERROR, verdict.withheld, decisive=True)

    def _judge_harness_tools(self) -> None:
        """Withhold the reward when a root agent changed what the harness's own steps run on (`awk`, `sh`, the
        loader): those steps, the check above included, could then say anything. The engine's list of changed
        files is asked, which nothing in the sandbox can forge."""
        changed = self.handle.changed_files()
        if changed is None:
            return
        commands = self._image_commands() if toolchain.adds_commands(changed) else frozenset()
        links = {folder: self.handle.link_target(folder) for folder in toolchain.folders_changed(changed)}
        found = toolchain.harness_tools_changed(changed, commands, links)
        if found:
            self._save("verifier/harness-tools.txt", "".join(f"{line}\n" for line in found))
            self.toolchain_changed = True
            self.outcome.fail(Status.VERIFIER_ERROR, toolchain.describe_harness_tools(found), decisive=True)

    def _image_commands(self) -> frozenset[str] | None:
        """The command names the image had on PATH, from the snapshot step's list read through the engine and
        checked against the md5 the harness kept; None when it cannot be had or trusted."""
        if not isinstance(self.toolchain, toolchain.Baseline):
            return None
        try:
            listed = self.handle.read_bytes(f"{self.private}/toolchain-baseline")
            named = self.handle.read_bytes(f"{self.private}/toolchain-named")
        except (OSError, SandboxError):
            return None
        return toolchain.image_commands(listed, named, self.toolchain)

    def _save_diff(self) -> None:
        """Save the diff the stop step made (as it printed it when small, else read from its file); when the stop
        step could not make it (the agent's processes could not be stopped, the workdir not checked), make it now:
        the diff is kept whatever the agent did."""
        if self.diff_exit == "not run":
            self._root(self._diff_command, what="diff the workdir")
        elif self.diff_exit != "0":
            raise SandboxError(f"could not diff the workdir in sandbox {self.handle.sandbox_id}: exit {self.diff_exit}")
        diff = self.diff if self.diff is not None else self.handle.read_bytes(self._diff_file)
        self._save_bytes("workdir.diff", diff)

    @property
    def _diff_file(self) -> str:
        return f"{self.private}/workdir.diff"

    @property
    def _diff_command(self) -> str:
        """The workdir's diff against the snapshot into the scratch dir (run in the workdir)."""
        return diff_command(self.private, self.workdir, self._diff_file, self.handle.git)

    def _place_verifier(self) -> None:
        """Where the verifier runs (`own_verifier.place`)."""
        in_agents = VerifierPlace(self.handle, self.private, self.root_env, self.own_processes, self.packed)
        self.place = own_verifier.place(
            self.verifier_mode,
            self.services,
            self.backend,
            self.verifier_request,
            in_agents,
            self.task,
            self.outcome,
            self._save,
        )

    def _verify(self) -> None:
        place = self.place
        assert place is not None, "_place_verifier comes first"
        VerifierPhase(
            place.handle,
            self.task,
            self.outcome,
            workdir=self.workdir,
            private=place.private,
            root_env=place.root_env,
            own_processes=place.own_processes,
            network=self.verifier_network,
            archives_in_env=self.archives_in_env,
            packed=place.packed,
            root=functools.partial(self._root, on=place.handle, root_env=place.root_env),
            save=self._save,
            egress=self.egress,
        ).run()

    def _collect(self) -> None:
        """What the agent recorded and the verifier's log dir into out/, under one `CopyBudget` for the
        rollout; what was cut, left out or unreadable goes to the outcome's notes (the status stays). A path the
        stop step or the verifier packed is extracted from what they printed; any other (too large, or its
        command did not run: the stop failed, no verifier) is copied by the backend."""
        # The agent-log dir's files land in out/<id>/agent/, any further path in a subfolder named after it.
        first, *more = self.launch.log_paths
        sources = [(first, self.out_dir / "agent")]
        sources += [(path, self.out_dir / "agent" / posixpath.basename(path)) for path in more]
        verifier = [(HARBOR_VERIFIER_LOGS, self.out_dir / "verifier" / "logs")]
        budget = CopyBudget()
        # A path that fails is a note; the others are still tried. The verifier's logs are where it ran.
        if self.place is None or not self.place.own:
            self.handle.copy_out_all(sources + verifier, budget, self.packed.archives)
        else:
            self.handle.copy_out_all(sources, budget, self.packed.archives)
            self.place.handle.copy_out_all(verifier, budget, self.place.packed.archives)
        self.outcome.notes += budget.finish()

    # -- helpers ----------------------------------------------------------------------------------

    def _run(self, command: RootCommand, *, what: str, envs: Mapping[str, str] | None = None) -> dict[str, str]:
        """A fused root command (`commands.py`) that must succeed, in the workdir; what each of its parts printed."""
        rendered = command.render()
        return rendered.split(self._root(["sh", "-c", rendered.script], what=what, envs=envs).stdout)

    def _root(
        self,
        cmd: str | list[str],
        *,
        what: str,
        cwd: str | None = None,
        envs: Mapping[str, str] | None = None,
        on: SandboxHandle | None = None,
        root_env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """A harness step as root (cwd: the workdir unless given; `envs` beside `root_env` for this command only)
        that must succeed; SandboxError otherwise. `on`: another sandbox than the agent's (the verifier's own),
        with its `root_env`."""
        handle = on or self.handle
        result = handle.exec(
            cmd,
            envs={**(root_env or self.root_env), **(envs or {})},
            cwd=cwd or self.workdir,
            timeout=STEP_TIMEOUT_SEC,
            user="root",
        )
        if result.exit_code != 0:
            raise SandboxError(
                f"could not {what} in sandbox {handle.sandbox_id}: "
                f"exit {result.exit_code}: {tail(result.stderr or result.stdout)}"
            )
        return result

    def _save(self, name: str, text: str) -> None:
        self._save_bytes(name, text.encode())

    def _save_bytes(self, name: str, data: bytes) -> None:
        path = self.out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _count(printed: str) -> int:
    """The sum of the counts a command printed (the OOM kills of cgroup v2 and v1, whichever exist)."""
    return sum(int(n) for n in printed.split() if n.isdigit())
