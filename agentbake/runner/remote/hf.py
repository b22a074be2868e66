"""The Hugging Face backend: the sandbox protocol over `huggingface_hub.Sandbox` (`pip install 'agentbake[hf]'`).

What a Hugging Face sandbox does that the harness must not inherit, each handled here:
- every command runs as root: the image user's commands run under `setpriv`, without the server's credential.
- a timed-out command has `exit_code=None`: it becomes exit 124, `timed_out`.
- background processes return no output and no wait: output and status go to root-only files, and the job
  is polled through `processes()`; a process that vanished is an error, never exit 0.
- `close()` leaves the sandbox running (billed): `kill()` ends it.

The image is the published reference for the image's content hash, never `latest`.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from agentbake.errors import SandboxError
from agentbake.runner.remote import base, image_facts
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.remote.image_facts import ImageFacts
from agentbake.runner.sandbox import ExecResult, SandboxRequest
from agentbake.runner.sandbox.deadline import TIMEOUT_EXIT, require_positive

ROLLOUT_LABEL = "agentbake-rollout"  # dash-separated, as the SDK's own job labels
OWNER_LABEL = "agentbake-owner"
ENDED_STAGES = ("COMPLETED", "ERROR", "DELETED", "CANCELED")
_JOBS_DIR = "/run/agentbake-jobs"


def transient(exc: Exception) -> bool:
    """Hub answers worth another try: rate limits, 5xx, broken connections."""
    import httpx2  # huggingface_hub's HTTP client (declared in the `hf` extra)
    from huggingface_hub.errors import HfHubHTTPError

    response = exc.response if isinstance(exc, HfHubHTTPError) else None
    status = getattr(exc, "status_code", None) or getattr(response, "status_code", None)
    if isinstance(status, int):
        return status == 429 or status >= 500
    return isinstance(exc, httpx2.TransportError | OSError)


class HFBackend(base.RemoteBackend):
    """Creates Hugging Face sandboxes (one Job each); `close()` kills every one still alive."""

    name = "hf"

    def __init__(self, config: HFConfig | None = None, *, image_facts: ImageFacts | None = None) -> None:
        self.config = config or HFConfig()
        super().__init__(self.config.relay, image_facts)
        self.sdk = base.import_sdk(
            "huggingface_hub", "the Hugging Face backend needs huggingface_hub: pip install 'agentbake[hf]'"
        )
        self.api = self.sdk.HfApi()

    def image(self, facts: ImageFacts) -> str:
        """The reference to start: the config's, else the published manifest's for this content hash (a task
        image: for its environment hash)."""
        if self.config.image and facts.environment is None:
            return self._pinned(self.config.image, "HFConfig.image")
        image = image_facts.published_reference(
            facts, self.config.manifest, "hf_image", "Hugging Face reference", "--hf` (or set HFConfig.image)"
        )
        return self._pinned(image, "published Hugging Face image")

    @staticmethod
    def _pinned(image: str, what: str) -> str:
        if image.startswith("hf.co/spaces/"):
            return image  # a Space is rebuilt from its own pinned files; the manifest names it per content hash
        return image_facts.refuse_moving_tag(image, what)

    def create(self, request: SandboxRequest) -> HFSandbox:
        facts = self.request_facts(request)
        image = self.image(facts)
        model_url = self.model_url(request)
        labels = {ROLLOUT_LABEL: request.rollout_id, OWNER_LABEL: f"{socket.gethostname()}-{os.getpid()}"}

        def create_once() -> Any:
            return self.sdk.Sandbox.create(
                image=image,
                flavor=self.config.flavor,
                idle_timeout=self.config.idle_timeout_s,
                env=dict(request.envs),
                namespace=self.config.namespace,
                forward_hf_token=False,
                labels=labels,
                start_timeout=self.config.start_timeout_s,
            )

        what = f"a Hugging Face sandbox from {image!r}"
        sdk_sandbox = base.with_create_retries(create_once, self.config, transient=transient, what=what)
        sandbox = HFSandbox(self, sdk_sandbox, facts, request.rollout_id, model_url)
        # The root-only folder background jobs report into, made in the same round trip as the home lookup.
        return self.adopt(sandbox, first=f"umask 077 && mkdir -p {_JOBS_DIR}")


class HFSandbox(base.RemoteSandbox):
    """One Hugging Face sandbox; commands through `run`, files through `files`."""

    cloud = "HF"
    _backend: HFBackend

    def __init__(
        self,
        backend: HFBackend,
        sdk_sandbox: Any,
        facts: ImageFacts,
        rollout_id: str,
        model_url: str | None,
    ) -> None:
        super().__init__(backend, sdk_sandbox, sdk_sandbox.id, facts, rollout_id, model_url)
        self._jobs = 0
        self._jobs_lock = threading.Lock()

    def as_user(self, command: str, user: str | None) -> str:
        """`command` as the given user (default: the image's); root's commands run unchanged."""
        user = user or self.user
        if user in ("root", "0"):
            return command
        quoted = shlex.quote(user)
        scrub = " ".join(f"-u {name}" for name in self._backend.config.scrubbed_env)
        identity = f"HOME={shlex.quote(self.home or '/')} USER={quoted} LOGNAME={quoted}"
        return (
            f'setpriv --reuid={quoted} --regid="$(id -g {quoted})" --init-groups --no-new-privs -- '
            f"env {scrub} {identity} sh -c {shlex.quote(command)}"
        )

    def exec(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        require_positive(timeout)
        command = self.as_user(base.shell_command(cmd), user)
        try:
            done = self._sandbox.run(command, env=dict(envs or {}), cwd=cwd, timeout=timeout, check=False)
        except Exception as exc:
            raise self._error("run a command in", exc) from None
        if done.timed_out or done.exit_code is None:
            # The server killed the command's process group at its deadline (or a signal ended it).
            if done.timed_out:
                return ExecResult(TIMEOUT_EXIT, done.stdout, done.stderr, timed_out=True)
            return ExecResult(128 + (done.signal or 9), done.stdout, done.stderr)
        return ExecResult(done.exit_code, done.stdout, done.stderr)

    def start_bg(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> base.ThreadedJob:
        with self._jobs_lock:
            self._jobs += 1
            capture = f"{_JOBS_DIR}/{self._jobs}"
        # The root shell opens the capture files before the command drops to the user: it cannot forge them.
        inner = self.as_user(base.shell_command(cmd), user)
        wrapper = f"{inner} > {capture}.out 2> {capture}.err; rc=$?; echo $rc > {capture}.rc; exit $rc"
        try:
            process = self._sandbox.run(wrapper, env=dict(envs or {}), cwd=cwd, background=True)
        except Exception as exc:
            raise self._error("start a background command in", exc) from None

        def wait() -> ExecResult:
            code = self._poll(process)
            out, err = self._capture(f"{capture}.out"), self._capture(f"{capture}.err")
            return ExecResult(code, out, err)

        return self.background_job(process, wait)

    def _poll(self, process: Any) -> int:
        """The process's exit code once `processes()` lists it as ended; vanished from the listing is an error."""
        interval = self._backend.config.poll_interval_s
        while True:
            try:
                listing = self._sandbox.processes()
            except Exception as exc:
                raise self._error("list the processes of", exc) from None
            found = next((p for p in listing if p.id == process.id), None)
            if found is None:
                raise SandboxError(
                    f"HF sandbox {self.sandbox_id}: background process {process.pid} vanished from processes(); "
                    "its exit status is unknown (the sandbox may have restarted or been killed)"
                )
            if not found.running:
                return found.exit_code if found.exit_code is not None else 137  # ended by a signal
            time.sleep(interval)

    def _capture(self, path: str) -> str:
        try:
            return self.read_text(path)
        except FileNotFoundError:
            return ""

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644, user: str | None = None) -> None:
        owner = user or self.user
        if not posixpath.isabs(path):
            raise SandboxError(f"sandbox {self.sandbox_id}: paths must be absolute, got {path!r}")
        parent = posixpath.dirname(path)
        if owner not in ("root", "0"):
            # Missing parents are created by the owner, as its own writes would: no root-owned dirs in its way.
            made = self.exec(["mkdir", "-p", parent], user=owner, timeout=60)
            if made.exit_code != 0:
                raise SandboxError(f"sandbox {self.sandbox_id}: {owner} cannot create {parent}: {made.stderr.strip()}")
        try:
            self._sandbox.files.write(path, data, mode=f"{mode:o}")
        except Exception as exc:
            raise self._error(f"write {path} in", exc) from None
        if owner not in ("root", "0"):
            quoted = shlex.quote(owner)
            owned = self.exec(f'chown {quoted}:"$(id -g {quoted})" {shlex.quote(path)}', user="root", timeout=60)
            if owned.exit_code != 0:
                raise SandboxError(f"sandbox {self.sandbox_id}: chown {owner} {path}: {owned.stderr.strip()}")

    def read_bytes(self, path: str) -> bytes:
        try:
            return bytes(self._sandbox.files.read(path))
        except Exception as exc:
            if getattr(exc, "status_code", None) == 404:
                raise FileNotFoundError(f"sandbox {self.sandbox_id}: no such file: {path}") from None
            raise self._error(f"read {path} from", exc) from None

    def exists(self, path: str) -> bool:
        try:
            return bool(self._sandbox.files.exists(path))
        except Exception as exc:
            raise self._error(f"look for {path} in", exc) from None

    def _end(self) -> None:
        """`kill()` (never only `close()`), then make sure the job ended: the SDK logs a failed kill and returns."""
        api, namespace = self._backend.api, self._backend.config.namespace

        def kill_and_check() -> None:
            self._sandbox.kill()
            job = api.inspect_job(job_id=self.sandbox_id, namespace=namespace)
            if job.status is None or job.status.stage not in ENDED_STAGES:
                api.cancel_job(job_id=self.sandbox_id, namespace=namespace)

        try:
            base.kill_with_retries(
                kill_and_check,
                what=f"HF sandbox {self.sandbox_id}",
                backstop=f"it ends itself after {self._backend.config.idle_timeout_s} s idle, or cancel it with "
                f"`hf jobs cancel {self.sandbox_id}`",
            )
        finally:
            self._sandbox.close()
