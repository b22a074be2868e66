"""What the E2B and Hugging Face backends share: the sandbox handle, retries, background jobs, lazy SDK imports.

The image facts each sandbox starts from come from `image_facts.py`.
"""

from __future__ import annotations

import abc
import importlib
import logging
import posixpath
import shlex
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentbake.errors import SandboxError
from agentbake.runner.remote.image_facts import ImageFacts, environment_facts, local_image_facts
from agentbake.runner.remote.relay import GatewayRelay, RelayConfig
from agentbake.runner.sandbox import BgJob, Capabilities, ExecResult, SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.runner.sandbox.protocol import kill_all

if TYPE_CHECKING:
    from agentbake.runner.remote.e2b_config import E2BConfig
    from agentbake.runner.remote.hf_config import HFConfig

logger = logging.getLogger("agentbake.runner")

T = TypeVar("T")
RemoteSandboxT = TypeVar("RemoteSandboxT", bound="RemoteSandbox")


def import_sdk(module: str, missing: str) -> Any:
    """The cloud's SDK module, imported when a backend is made; SandboxError `missing` (what to install)
    when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SandboxError(missing) from None


def with_create_retries(
    create: Callable[[], T], config: E2BConfig | HFConfig, *, transient: Callable[[Exception], bool], what: str
) -> T:
    """Call `create` until it succeeds, at most `config.create_attempts` times, sleeping `config.retry_backoff_s
    * 2**n` between tries; only errors `transient` accepts are retried. `create` itself must leave nothing behind
    when it fails."""
    attempts = config.create_attempts
    for attempt in range(1, attempts + 1):
        try:
            return create()
        except Exception as exc:
            if not transient(exc) or attempt == attempts:
                tried = f" after {attempt} tries" if attempt > 1 else ""
                raise SandboxError(f"cannot create {what}{tried}: {type(exc).__name__}: {exc}") from exc
            logger.info("create %s failed (%s), try %d of %d", what, exc, attempt + 1, attempts)
            time.sleep(config.retry_backoff_s * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


KILL_ATTEMPTS = 3
"""Tries of a sandbox kill: a dropped connection must not leave a billed sandbox running."""


def kill_with_retries(kill: Callable[[], object], *, what: str, backstop: str) -> None:
    """Call `kill` until it succeeds, at most KILL_ATTEMPTS times; SandboxError naming the backstop otherwise."""
    for attempt in range(1, KILL_ATTEMPTS + 1):
        try:
            kill()
            return
        except Exception as exc:
            if attempt == KILL_ATTEMPTS:
                raise SandboxError(f"cannot kill {what} after {attempt} tries: {exc}; {backstop}") from None
            time.sleep(0.2 * 2 ** (attempt - 1))


def shell_command(cmd: str | list[str]) -> str:
    """The command as one shell string (both clouds take a string and run it under a shell)."""
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


def home_of(handle: SandboxHandle, user: str, *, first: str | None = None) -> str:
    """The user's home as the sandbox's passwd database says (root runs the lookup: it always can).
    `first`, a root command that must succeed, runs in the same round trip (one command less at create)."""
    lookup = f"getent passwd {shlex.quote(user)}"
    found = handle.exec(f"{first} && {lookup}" if first else lookup, user="root", timeout=30)
    fields = found.stdout.strip().split(":")
    if found.exit_code != 0 or len(fields) < 6 or not posixpath.isabs(fields[5]):
        raise SandboxError(
            f"sandbox {handle.sandbox_id}: no home for user {user!r} in its passwd database (exit {found.exit_code}"
            f"{': ' + found.stderr.strip()[:200] if found.stderr.strip() else ''}): is the published image the one "
            "built here?"
        )
    return fields[5]


class ThreadedJob(BgJob):
    """A background command waited for in a thread, so `wait(timeout)` really times out."""

    def __init__(self, pid: int, waiter: Callable[[], ExecResult], killer: Callable[[], None], name: str) -> None:
        self.pid = pid
        self._killer = killer
        self._result: ExecResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._wait, args=(waiter,), daemon=True, name=name)
        self._thread.start()

    def _wait(self, waiter: Callable[[], ExecResult]) -> None:
        try:
            self._result = waiter()
        except BaseException as exc:  # reported by wait()
            self._error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> ExecResult:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"background command {self.pid} still runs after {timeout} s")
        if self._error is not None:
            if isinstance(self._error, SandboxError):
                raise self._error
            raise SandboxError(f"background command {self.pid}: {type(self._error).__name__}: {self._error}")
        assert self._result is not None
        return self._result

    def kill(self) -> None:
        if self.done:
            return
        self._killer()
        self._thread.join(10)


class RemoteSandbox(SandboxHandle):
    """What a remote backend's handle shares: its rollout, its SDK's errors named, being killed only once."""

    cloud: str
    """How messages name the cloud: `E2B sandbox <id>`."""

    def __init__(
        self,
        backend: RemoteBackend,
        sdk_sandbox: Any,
        sandbox_id: str,
        facts: ImageFacts,
        rollout_id: str,
        model_url: str | None,
    ) -> None:
        self._backend = backend
        self._sandbox = sdk_sandbox
        self.sandbox_id = sandbox_id
        self.user = facts.user
        self.home = ""  # asked from the sandbox by RemoteBackend.adopt
        self.paths = dict(facts.paths)
        self.python = facts.python
        self.git = facts.git
        self.model_url = model_url
        self.rollout_id = rollout_id
        self.killed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sandbox_id!r}, rollout={self.rollout_id!r})"

    def _error(self, action: str, exc: Exception) -> SandboxError:
        gone = " (the sandbox was killed)" if self.killed else ""
        return SandboxError(
            f"cannot {action} {self.cloud} sandbox {self.sandbox_id}{gone}: {type(exc).__name__}: {exc}"
        )

    def background_job(self, process: Any, wait: Callable[[], ExecResult]) -> ThreadedJob:
        """The job of an SDK's background process (its `pid`, `kill()`), whose end `wait` returns."""

        def kill() -> None:
            try:
                process.kill()
            except Exception as exc:
                raise self._error("kill a background command in", exc) from None

        name = f"{self._backend.name}-{self.sandbox_id}-{process.pid}"
        return ThreadedJob(process.pid, wait, kill, name=name)

    def before_kill(self, step: Callable[[], None]) -> None:
        self.__dict__.setdefault("_before_kill", []).append(step)

    def run_before_kill(self) -> None:
        steps, self.__dict__["_before_kill"] = self.__dict__.get("_before_kill", []), []
        for step in steps:
            try:
                step()
            except Exception as exc:
                logger.warning("sandbox %s: before kill: %s", self.sandbox_id, exc)

    def kill(self) -> None:
        if self.killed:
            return
        self.run_before_kill()
        self._end()
        self.killed = True
        self._backend.forget(self)

    @abc.abstractmethod
    def _end(self) -> None:
        """End the sandbox in its cloud (`kill_with_retries`); SandboxError naming the backstop otherwise."""

    def kill_quietly(self) -> None:
        """Kill on a failure path: a failing kill is logged so the original error is the one raised."""
        try:
            self.kill()
        except SandboxError as exc:
            logger.warning("%s", exc)


class RemoteBackend(SandboxBackend):
    """What the E2B and Hugging Face backends share: image facts, the gateway relay, the live sandboxes."""

    capabilities = Capabilities(gateway_in_sandbox=True, task_images=True)

    def __init__(self, relay: RelayConfig, image_facts: ImageFacts | None) -> None:
        self._relay_config = relay
        self._relay: GatewayRelay | None = None
        self._facts = {image_facts.ref: image_facts} if image_facts else {}
        self._live: dict[str, RemoteSandbox] = {}
        self._lock = threading.Lock()

    def request_facts(self, request: SandboxRequest) -> ImageFacts:
        """The facts of the request's image; for a task's own image, those of the layered environment it starts."""
        if request.agent_bundle is not None:
            key = f"{request.image}\0{request.agent_bundle}"
            if key not in self._facts:
                self._facts[key] = environment_facts(request.image, request.agent_bundle)
            return self._facts[key]
        return self.facts(request.image)

    def facts(self, ref: str) -> ImageFacts:
        if ref not in self._facts:
            self._facts[ref] = local_image_facts(ref)
        return self._facts[ref]

    def model_url(self, request: SandboxRequest) -> str | None:
        """`--gateway host`: the rollout's gateway socket made reachable through the relay (started once)."""
        if request.gateway_socket is None:
            return None
        with self._lock:
            if self._relay is None:
                self._relay = GatewayRelay(self._relay_config)
        return self._relay.register(request.rollout_id, request.gateway_socket)

    def track(self, sandbox: RemoteSandbox) -> None:
        with self._lock:
            self._live[sandbox.sandbox_id] = sandbox

    def adopt(self, sandbox: RemoteSandboxT, *, first: str | None = None) -> RemoteSandboxT:
        """Track a just-created sandbox and ask it for its user's home.

        A sandbox that cannot answer is killed here, since the caller never receives it to kill."""
        self.track(sandbox)
        try:
            sandbox.home = home_of(sandbox, sandbox.user, first=first)
        except BaseException:
            sandbox.kill_quietly()
            raise
        return sandbox

    def forget(self, sandbox: RemoteSandbox) -> None:
        with self._lock:
            self._live.pop(sandbox.sandbox_id, None)
        if self._relay is not None:
            self._relay.unregister(sandbox.rollout_id)

    def live(self) -> list[RemoteSandbox]:
        with self._lock:
            return list(self._live.values())

    def close(self) -> None:
        """Kill every sandbox still alive, then stop the relay; a failed kill is raised after the rest."""
        try:
            kill_all(self.live())
        finally:
            if self._relay is not None:
                self._relay.close()
                self._relay = None
