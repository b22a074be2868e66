"""The E2B backend: the sandbox protocol over E2B's SDK (`pip install 'agentbake[e2b]'`).

What E2B does that the harness must not inherit, each handled here:
- a 60 s default command deadline: commands run with `timeout=0` and their own deadline inside the sandbox.
- `CommandHandle.wait()` has no timeout: background jobs are waited on in a thread (`ThreadedJob`).
- a non-zero exit raises `CommandExitException`: it becomes an `ExecResult`, as on Docker.
- a login shell resets PATH: a PATH the caller gives is set again in the command.
- open egress: a phase's network policy stricter than public becomes the sandbox's egress rules.
- a sandbox outlives a failed creator: every failure after create kills it, E2B's timeout is the backstop.

The template is the one published for the image's content hash, never `latest`.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import socket
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from agentbake.errors import SandboxError
from agentbake.runner.remote import base, image_facts
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.image_facts import ImageFacts
from agentbake.runner.sandbox import Capabilities, ExecResult, SandboxRequest
from agentbake.runner.sandbox.deadline import deadline_command, deadline_result
from agentbake.tasks.task_network import NetworkPolicy

ROLLOUT_KEY = "dev.agentbake.rollout"
OWNER_KEY = "dev.agentbake.owner"
IMAGE_KEY = "dev.agentbake.image"
_KEY_UNSAFE = re.compile(r"[^a-z0-9-]")
"""Idempotency keys take lowercase letters, digits and dashes only."""


def transient(exc: Exception) -> bool:
    """E2B answers worth another try: rate limits, a busy or failing service, broken connections."""
    import e2b
    import httpx  # the SDK's control-plane client (declared in the `e2b` extra)

    if isinstance(exc, e2b.RateLimitException | e2b.ServiceBusyException | httpx.TransportError | OSError):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status >= 500


class E2BBackend(base.RemoteBackend):
    """Creates E2B sandboxes; `close()` kills every one this backend still has alive."""

    name = "e2b"
    capabilities = Capabilities(gateway_in_sandbox=True, task_images=True, egress_rules=True)

    def __init__(self, config: E2BConfig | None = None, *, image_facts: ImageFacts | None = None) -> None:
        self.config = config or E2BConfig()
        super().__init__(self.config.relay, image_facts)
        self.sdk = base.import_sdk("e2b", "the E2B backend needs the e2b SDK: pip install 'agentbake[e2b]'")

    def template(self, facts: ImageFacts) -> str:
        """The template to start: the config's, else the published manifest's for this content hash (a task
        image: for its environment hash)."""
        if self.config.template and facts.environment is None:
            return image_facts.refuse_moving_tag(self.config.template, "E2BConfig.template")
        template = image_facts.published_reference(
            facts, self.config.manifest, "e2b_template", "E2B template", "--e2b` (or set E2BConfig.template)"
        )
        return image_facts.refuse_moving_tag(template, "published E2B template")

    def create(self, request: SandboxRequest) -> E2BSandbox:
        facts = self.request_facts(request)
        template = self.template(facts)
        model_url = self.model_url(request)
        metadata = {ROLLOUT_KEY: request.rollout_id, OWNER_KEY: f"{socket.gethostname()}:{os.getpid()}"}
        metadata[IMAGE_KEY] = facts.ref
        # One key for every try: a create whose answer was lost is answered again, not started twice.
        idempotency_key = f"{_KEY_UNSAFE.sub('-', request.rollout_id.lower())[:200]}-{secrets.token_hex(8)}"

        networks = request.networks
        relay = [urllib.parse.urlsplit(model_url).hostname or ""] if model_url else []
        rules = egress_rules(networks.agent, relay) if networks is not None else None

        def create_once() -> Any:
            return self.sdk.Sandbox.create(
                template=template,
                timeout=self.config.sandbox_timeout_s,
                metadata=metadata,
                envs=dict(request.envs),
                request_timeout=self.config.request_timeout_s,
                idempotency_key=idempotency_key,
                retries=0,  # E2BConfig.create_attempts is the one bound on tries
                **({"network": rules} if rules is not None else {}),
            )

        what = f"an E2B sandbox from template {template!r}"
        sdk_sandbox = base.with_create_retries(create_once, self.config, transient=transient, what=what)
        sandbox = E2BSandbox(self, sdk_sandbox, facts, request.rollout_id, model_url)
        if networks is not None and (rules is not None or networks.verifier.mode != "public"):
            sandbox.verifier_rules = egress_rules(networks.verifier, []) or {}
        return self.adopt(sandbox)


def egress_rules(policy: NetworkPolicy, also: list[str]) -> dict[str, list[str]] | None:
    """E2B's egress rules for a phase's policy: None for public, else all denied but the policy's hosts and `also`."""
    if policy.mode == "public":
        return None
    allowed = [*policy.allowed_hosts, *(host for host in also if host)]
    return {"deny_out": ["0.0.0.0/0"], **({"allow_out": allowed} if allowed else {})}


class E2BSandbox(base.RemoteSandbox):
    """One E2B sandbox; commands and files through the SDK's `commands` and `files`."""

    cloud = "E2B"
    _backend: E2BBackend

    def __init__(
        self,
        backend: E2BBackend,
        sdk_sandbox: Any,
        facts: ImageFacts,
        rollout_id: str,
        model_url: str | None,
    ) -> None:
        super().__init__(backend, sdk_sandbox, sdk_sandbox.sandbox_id, facts, rollout_id, model_url)
        self._sdk = backend.sdk
        self.verifier_rules: dict[str, list[str]] | None = None
        """The egress rules of the verifier phase ({}: the cloud's internet); None: the sandbox has no rules."""

    def enter_verifier_network(self) -> None:
        if self.verifier_rules is None:
            return
        try:
            self._sandbox.update_network(self.verifier_rules)  # replaces every rule: {} lifts them all
        except Exception as exc:
            raise self._error("set the verifier's egress rules of", exc) from None

    def _run(self, command: str, envs: Mapping[str, str] | None, cwd: str | None, user: str | None, **kw: Any) -> Any:
        if envs and "PATH" in envs:  # envd runs `bash -l -c`: a login shell's profile sets PATH over the given one
            command = f"export PATH={shlex.quote(envs['PATH'])}; {command}"
        try:
            return self._sandbox.commands.run(
                command, envs=dict(envs or {}), cwd=cwd, user=user or self.user, timeout=0, **kw
            )
        except self._sdk.CommandExitException:
            raise
        except Exception as exc:
            raise self._error("run a command in", exc) from None

    def exec(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        command = deadline_command(base.shell_command(cmd), timeout)
        started = time.monotonic()
        try:
            done = self._run(command, envs, cwd, user)
            result = ExecResult(done.exit_code, done.stdout, done.stderr)
        except self._sdk.CommandExitException as exc:
            result = ExecResult(exc.exit_code, exc.stdout, exc.stderr)
        return deadline_result(result, timeout, started)

    def start_bg(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> base.ThreadedJob:
        handle = self._run(base.shell_command(cmd), envs, cwd, user, background=True)

        def wait() -> ExecResult:
            try:
                done = handle.wait()
                return ExecResult(done.exit_code, done.stdout, done.stderr)
            except self._sdk.CommandExitException as exc:
                return ExecResult(exc.exit_code, exc.stdout, exc.stderr)
            except Exception as exc:
                raise self._error("wait for a background command in", exc) from None

        return self.background_job(handle, wait)

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644, user: str | None = None) -> None:
        owner = user or self.user
        try:
            self._sandbox.files.write(path, data, user=owner)  # parents created, owned by `owner`
        except Exception as exc:
            raise self._error(f"write {path} in", exc) from None
        if mode != 0o644:
            changed = self.exec(["chmod", f"{mode:o}", path], user="root", timeout=60)
            if changed.exit_code != 0:
                raise SandboxError(f"sandbox {self.sandbox_id}: chmod {mode:o} {path}: {changed.stderr.strip()}")

    def read_bytes(self, path: str) -> bytes:
        try:
            return bytes(self._sandbox.files.read(path, format="bytes", user="root"))
        except self._sdk.NotFoundException:
            raise FileNotFoundError(f"sandbox {self.sandbox_id}: no such file: {path}") from None
        except Exception as exc:
            raise self._error(f"read {path} from", exc) from None

    def exists(self, path: str) -> bool:
        try:
            return bool(self._sandbox.files.exists(path, user="root"))
        except Exception as exc:
            raise self._error(f"look for {path} in", exc) from None

    def _end(self) -> None:
        base.kill_with_retries(
            self._sandbox.kill,  # False when E2B no longer has it: gone is what we want
            what=f"E2B sandbox {self.sandbox_id}",
            backstop=f"it ends by itself after {self._backend.config.sandbox_timeout_s} s",
        )
