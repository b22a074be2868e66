"""The Docker backend: hardened containers with no network, through docker-py (isolation: README.md)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import docker.errors

from agentbake.errors import SandboxError
from agentbake.runner.docker import verifier_sandbox
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.docker.engine import EGRESS_SOCKET, GATEWAY_SOCKET, DockerEngine
from agentbake.runner.docker.sandbox import DockerSandbox
from agentbake.runner.docker.warm_pool import WarmPool
from agentbake.runner.sandbox import Capabilities, SandboxBackend, SandboxHandle, SandboxRequest
from agentbake.runner.sandbox.copyout import CopyBudget
from agentbake.runner.sandbox.protocol import kill_all


class DockerBackend(SandboxBackend):
    """Creates sandboxes on the local engine (DOCKER_HOST); `close()` removes every one still alive."""

    name = "docker"
    capabilities = Capabilities(
        warm_pool=True, task_images=True, network_phases=True, large_exec_env=True, verifier_sandbox=True
    )

    def __init__(self, config: DockerConfig | None = None, *, base_url: str | None = None):
        self.config = config or DockerConfig()
        self.engine = DockerEngine(self.config, base_url=base_url)
        self._live: dict[str, DockerSandbox] = {}
        self._closed = False
        self._lock = threading.Lock()
        self.pool = WarmPool(self.engine, self.config.warm)

    # -- create ------------------------------------------------------------------------------------

    def create(self, request: SandboxRequest) -> DockerSandbox:
        image = self.engine.image(request.image, request.agent_bundle)
        for what, path in (("gateway", request.gateway_socket), ("egress proxy", request.egress_socket)):
            if path is None:
                continue
            if image.python is None:
                raise SandboxError(
                    f"image {request.image!r} has no label dev.agentbake.python: the {what} relay needs the image's "
                    "python; build the image with `agentbake build`"
                )
            if not Path(path).exists():
                raise SandboxError(f"{what} socket {path} does not exist; start the {what} first")
        limits = self.engine.limits(request)
        # A sandbox whose verifier gets a network starts on it, disconnected: never one of the warm pool's.
        network = self.engine.verifier_network() if request.verifier_network else None
        taken = None if network else self.pool.take(image, limits)
        container_id, name = taken or self.engine.start_container(image, limits, request.rollout_id, network=network)
        try:
            model_url = self._connect_gateway(name, request.gateway_socket)
            if request.egress_socket is not None:
                self._link(request.egress_socket, name, EGRESS_SOCKET)
        except BaseException:
            self.engine.discard(name)
            raise
        sandbox = DockerSandbox(
            self.engine, container_id, name, image, image.user, request.envs, model_url, request.rollout_id, self.remove
        )
        sandbox.storage_limit_mb = request.storage_mb or self.config.storage_mb
        sandbox.network = network
        sandbox.egress_port = None if request.egress_socket is None else self.config.egress_port
        with self._lock:
            closed = self._closed
            if not closed:
                self._live[container_id] = sandbox
        if closed:  # closed while this create ran (a batch's teardown): nothing may outlive close()
            self.engine.discard(name)
            raise SandboxError(f"the Docker backend was closed while sandbox {name} started; it was removed")
        return sandbox

    def warm_up(self, request: SandboxRequest) -> None:
        """Fill the warm pool (DockerConfig.warm) for this request's image and limits; returns once started."""
        self.pool.fill(self.engine.image(request.image, request.agent_bundle), self.engine.limits(request))

    def _connect_gateway(self, name: str, gateway_socket: str | None) -> str | None:
        if gateway_socket is None:
            return None
        self._link(gateway_socket, name, GATEWAY_SOCKET)
        return f"http://127.0.0.1:{self.config.model_port}"

    def _link(self, socket_path: str, name: str, link_name: str) -> None:
        """Hard-link a host socket into the sandbox's folder, where its relay finds it."""
        link = self.config.runtime_dir / name / link_name
        try:
            os.link(socket_path, link)
        except OSError as exc:
            raise SandboxError(
                f"cannot link the socket {socket_path} into {link.parent} ({exc.strerror}); it must be on "
                f"the same filesystem as DockerConfig.runtime_dir ({self.config.runtime_dir})"
            ) from None

    # -- the verifier's own sandbox (verifier_sandbox.py) ----------------------------------------------

    def snapshot(self, agent: SandboxHandle) -> DockerSandbox:
        return verifier_sandbox.snapshot(self, self._ours(agent))

    def fresh_verifier(self, agent: SandboxHandle, request: SandboxRequest) -> DockerSandbox:
        image = self.engine.image(request.image, request.agent_bundle)
        limits = self.engine.limits(request) if request.cpus or request.memory_mb else None
        return verifier_sandbox.fresh(self, self._ours(agent), image, limits)

    def hand_over(
        self, source: SandboxHandle, target: SandboxHandle, path: str, exclude: tuple[str, ...], budget: CopyBudget
    ) -> bool:
        return verifier_sandbox.copy_into(self._ours(source), self._ours(target), path, exclude, budget)

    def adopt(self, sandbox: DockerSandbox) -> None:
        """Count a sandbox made outside `create` (a verifier's) among the live ones: `close` removes it too."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._live[sandbox.sandbox_id] = sandbox
        if closed:
            sandbox.kill()
            raise SandboxError(f"the Docker backend was closed while sandbox {sandbox.name} started; it was removed")

    @staticmethod
    def _ours(handle: SandboxHandle) -> DockerSandbox:
        if not isinstance(handle, DockerSandbox):
            raise SandboxError(f"sandbox {handle.sandbox_id} is not a Docker sandbox")
        return handle

    # -- removal -----------------------------------------------------------------------------------

    def remove(self, sandbox: DockerSandbox) -> None:
        """Remove a sandbox (SIGKILL, no grace period); safe to call twice."""
        with self._lock:
            if sandbox.killed:
                return
            sandbox.killed = True
            self._live.pop(sandbox.sandbox_id, None)
        try:
            self.engine.api.remove_container(sandbox.sandbox_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(
                f"cannot remove sandbox {sandbox.name}: {exc}; `agentbake gc` removes it later"
            ) from None
        finally:
            shutil.rmtree(self.config.runtime_dir / sandbox.name, ignore_errors=True)

    def live(self) -> list[DockerSandbox]:
        with self._lock:
            return list(self._live.values())

    def close(self) -> None:
        """Remove every live sandbox this backend made, and the warm pool's. A `create` still running then fails."""
        with self._lock:
            self._closed = True
        self.pool.close()
        kill_all(self.live())
