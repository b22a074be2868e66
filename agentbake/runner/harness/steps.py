"""The steps of one rollout inside a sandbox, the same for every agent and backend.

upload -> setup.sh -> snapshot -> agent -> stop its user's processes -> diff -> tests/ uploaded -> test.sh -> reward
-> collect. The order is the tamper-proofing: nothing the agent started is alive when the verifier's files appear,
and root steps never read the agent's home.
"""

from __future__ import annotations

import functools
import logging
import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agentbake.errors import SandboxError
from agentbake.runner.agents import AgentImage, AgentLaunch, headless_launch
from agentbake.runner.choices import VerifierMode
from agentbake.runner.harness import after_agent, before_agent, commands, own_verifier, toolchain
from agentbake.runner.harness.agent_phase import STEP_TIMEOUT_SEC, run_agent
from agentbake.runner.harness.before_agent import HARBOR_SOLUTION_DIR
from agentbake.runner.harness.commands import RootCommand
from agentbake.runner.harness.listeners import Service
from agentbake.runner.harness.outcome import HarnessOutcome, describe_error
from agentbake.runner.harness.own_verifier import VerifierPlace
from agentbake.runner.harness.upload import HandedArchive
from agentbake.runner.harness.verifier import HARBOR_VERIFIER_LOGS
from agentbake.runner.harness.verifier_phase import VerifierNetwork, VerifierPhase, tail
from agentbake.runner.result import Status, Timings
from agentbake.runner.sandbox import ExecResult, SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.runner.sandbox.copyout import CopyBudget
from agentbake.runner.sandbox.packed import PackedLogs
from agentbake.tasks import Task

if TYPE_CHECKING:
    from agentbake.runner.network import RolloutEgress

logger = logging.getLogger("agentbake.runner")


def oracle_launch(task: Task, image: AgentImage) -> AgentLaunch:
    """The task's `solution/solve.sh` in place of an agent: run like one, as the agent's user, with no model."""
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
        # `backend` makes the verifier's own sandbox (None: no service is kept); `verifier_request` is separate mode's.
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
        """Run the steps in order. After the agent starts, a failing step is `sandbox_error` and later steps still run
        where they can; the verifier runs only once the agent's processes are gone."""
        with self.timings.phase("upload"):
            before_agent.upload_agent_files(self)
        with self.timings.phase("setup"):
            setup_ok = before_agent.setup(self) and before_agent.snapshot(self)
        if setup_ok:
            with self.timings.phase("agent"):
                self._step(self._run_agent, "the agent's run")
            with self.timings.phase("stop"):
                # Decisive: with the agent's processes alive (or the sandbox lost) no verifier runs.
                stop = functools.partial(after_agent.stop_agent_user, self)
                stopped = self._step(stop, "stopping the agent", decisive=True)
            with self.timings.phase("collect"):
                # made by the stop step's exec
                self._step(functools.partial(after_agent.save_diff, self), "the workdir diff")
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
            self.save,
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
            root=functools.partial(self.root, on=place.handle, root_env=place.root_env),
            save=self.save,
            egress=self.egress,
        ).run()

    def _collect(self) -> None:
        """Copy the agent's logs and the verifier's into out/ under one `CopyBudget`. What was cut or unreadable
        becomes a note; the status stays."""
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

    def run_root(self, command: RootCommand, *, what: str, envs: Mapping[str, str] | None = None) -> dict[str, str]:
        """A fused root command (`commands.py`) that must succeed, in the workdir; what each of its parts printed."""
        rendered = command.render()
        return rendered.split(self.root(["sh", "-c", rendered.script], what=what, envs=envs).stdout)

    def root(
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

    def save(self, name: str, text: str) -> None:
        self.save_bytes(name, text.encode())

    def save_bytes(self, name: str, data: bytes) -> None:
        path = self.out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
