"""The Docker engine as the sandboxes use it: API clients, image facts, starting and removing containers.

The bottom of the backend: `sandbox.py`, `warm_pool.py` and `backend.py` import it, never the reverse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from agentbake.buildkit.engine import api_client
from agentbake.buildkit.labels import ImageLabels
from agentbake.errors import SandboxError
from agentbake.runner.docker import labels
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.sandbox import SandboxRequest
from agentbake.tasks.bundle import BUNDLE_MOUNT

MOUNT = "/run/agentbake"
"""Where the sandbox's host folder appears inside it (read-only)."""
FORWARDER = "forwarder.py"
GATEWAY_SOCKET = "gateway.sock"
EGRESS_SOCKET = "egress.sock"
_FORWARDER_SOURCE = Path(__file__).with_name(FORWARDER)


@dataclass(frozen=True)
class ImageInfo:
    """What the harness needs from an image, read once from its labels."""

    ref: str
    id: str
    user: str
    home: str
    python: str | None
    """The baked interpreter that runs the forwarder (label `dev.agentbake.python`)."""
    paths: dict[str, str] = field(default_factory=dict)
    uid: int | None = None
    git: str = "git"
    """The git the harness runs (label `dev.agentbake.git`; the image's own on PATH when absent)."""
    bundle: str | None = None
    """The agent bundle volume mounted at /opt/agentbake (a task's own image; `SandboxRequest.agent_bundle`)."""


@dataclass(frozen=True)
class Limits:
    nano_cpus: int
    memory_mb: int
    pids: int


def transient(exc: BaseException) -> bool:
    """Engine errors worth another try: 5xx answers and broken connections, not bad requests."""
    if isinstance(exc, docker.errors.APIError):
        return exc.status_code is not None and exc.status_code >= 500 and not isinstance(exc, docker.errors.NotFound)
    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout | ConnectionError)


def slug(rollout_id: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", rollout_id)[:40] or "sandbox"


class DockerEngine:
    """The local engine (DOCKER_HOST) with this backend's settings: images, users, limits, containers."""

    def __init__(self, config: DockerConfig, *, base_url: str | None = None):
        self.config = config
        try:
            # Two clients: engine calls time out; command output streams wait as long as the command runs.
            self.api = api_client(base_url, timeout=self.config.engine_timeout_s, max_pool_size=64)
            self.stream_api = api_client(base_url, timeout=None, max_pool_size=64)
        except docker.errors.DockerException as exc:
            raise SandboxError(f"no Docker engine answers ({exc}); start one or set DOCKER_HOST") from None
        self._own_runtime_dir()
        self._images: dict[str, ImageInfo] = {}
        self._ids: dict[tuple[str, str], tuple[int, int]] = {}
        self._engine_cpus: int | None = None
        self._network_ready = threading.Lock()
        self._network_made = False

    def _own_runtime_dir(self) -> None:
        """Create the sandboxes' host folder, private to this user. Refuse one another user made: it could hold planted
        links."""
        folder = self.config.runtime_dir
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_uid != os.getuid():
            raise SandboxError(
                f"{folder} (DockerConfig.runtime_dir) belongs to another user; remove it or choose another folder"
            )

    # -- images ------------------------------------------------------------------------------------

    def image(self, ref: str, bundle: str | None = None) -> ImageInfo:
        """The image's harness facts (cached) with its agent bundle. SandboxError when it is missing or has no user."""
        if ref in self._images:
            return dataclasses.replace(self._images[ref], bundle=bundle)
        try:
            attrs = self.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"image {ref!r} is not on this engine; build it with `agentbake build <name>` "
                "(tags are listed by `agentbake images`)"
            ) from None
        except docker.errors.DockerException as exc:
            raise SandboxError(f"cannot inspect image {ref!r}: {exc}") from None
        config = attrs.get("Config") or {}
        image_labels = config.get("Labels") or {}
        # Read label by label, not as a whole ImageLabels: any image with a non-root USER runs here too.
        labelled = image_labels.get(ImageLabels.key("user"))
        user = self.config.user or labelled or (config.get("User") or "").split(":")[0]
        # Root only where agentbake's own label chose it: a task's runnable image whose user is root (Harbor's).
        if user == "" or (user in ("root", "0") and (self.config.user or labelled not in ("root", "0"))):
            raise SandboxError(
                f"image {ref!r} names no non-root user (label dev.agentbake.user or USER) and the agent runs as "
                "root only in a task's own image (agentbake.tasks.runnable); build it with a USER or set "
                "DockerConfig.user"
            )
        env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
        uid = image_labels.get(ImageLabels.key("uid"))
        info = ImageInfo(
            ref=ref,
            id=attrs["Id"],
            user=user,
            home=image_labels.get(ImageLabels.key("home")) or env.get("HOME") or f"/home/{user}",
            python=image_labels.get(ImageLabels.key("python")),
            paths={short: image_labels[key] for short, key in ImageLabels.path_keys().items() if key in image_labels},
            uid=int(uid) if uid and uid.isdigit() else None,
            git=image_labels.get(ImageLabels.key("git")) or "git",
        )
        self._images[ref] = info
        return dataclasses.replace(info, bundle=bundle)

    def ids(self, image: ImageInfo, user: str, read_passwd: Callable[[], str]) -> tuple[int, int]:
        """uid and gid of a user inside an image (its /etc/passwd, read once per image by `read_passwd`)."""
        if user in ("root", "0"):
            return 0, 0
        key = (image.id, user)
        if key not in self._ids:
            for line in read_passwd().splitlines():
                fields = line.split(":")
                if len(fields) >= 4 and fields[2].isdigit() and fields[3].isdigit():
                    self._ids[(image.id, fields[0])] = (int(fields[2]), int(fields[3]))
                    self._ids[(image.id, fields[2])] = (int(fields[2]), int(fields[3]))
            if key not in self._ids:
                raise SandboxError(f"user {user!r} is not in /etc/passwd of image {image.ref!r}")
        return self._ids[key]

    # -- containers --------------------------------------------------------------------------------

    def limits(self, request: SandboxRequest) -> Limits:
        if self._engine_cpus is None:
            self._engine_cpus = int(self.api.info().get("NCPU") or os.cpu_count() or 1)
        cpus = min(request.cpus or self.config.cpus, self._engine_cpus)
        return Limits(int(cpus * 1e9), request.memory_mb or self.config.memory_mb, self.config.pids_limit)

    def verifier_network(self) -> str:
        """The network sandboxes join for their verifier (`DockerConfig.verifier_network`), made on first use:
        a bridge with no traffic between its containers."""
        with self._network_ready:
            if not self._network_made:
                self._make_network(self.config.verifier_network)
                self._network_made = True
        return self.config.verifier_network

    def _make_network(self, name: str) -> None:
        try:
            self.api.inspect_network(name)
            return
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(f"cannot inspect the verifier's network {name!r}: {exc}") from None
        try:
            self.api.create_network(
                name,
                driver="bridge",
                options={"com.docker.network.bridge.enable_icc": "false"},
                labels={labels.NETWORK: "verifier"},
                check_duplicate=True,
            )
        except docker.errors.DockerException as exc:
            if not (isinstance(exc, docker.errors.APIError) and exc.status_code == 409):  # another runner made it
                raise SandboxError(f"cannot make the verifier's network {name!r}: {exc}") from None

    def start_container(
        self, image: ImageInfo, limits: Limits, rollout_id: str, *, network: str | None = None
    ) -> tuple[str, str]:
        """Create and start one container, retrying transient engine errors; nothing is left on failure. With
        `network`, it is created on it and disconnected before it starts, so it can be connected later."""
        attempts = self.config.create_attempts
        for attempt in range(1, attempts + 1):
            name = f"agentbake-{slug(rollout_id)}-{secrets.token_hex(4)}"
            try:
                return self._start_once(image, limits, rollout_id, name, network), name
            except BaseException as exc:
                self.discard(name)
                if not isinstance(exc, Exception):
                    raise
                if not transient(exc) or attempt == attempts:
                    tried = f" after {attempt} tries" if attempt > 1 else ""
                    raise SandboxError(f"cannot start a sandbox from {image.ref!r}{tried}: {exc}") from exc
                time.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def _start_once(self, image: ImageInfo, limits: Limits, rollout_id: str, name: str, network: str | None) -> str:
        host_dir = self.config.runtime_dir / name
        host_dir.mkdir(mode=0o755)
        if image.python:
            shutil.copyfile(_FORWARDER_SOURCE, host_dir / FORWARDER)
            # Both relays always: a socket that is not (yet) linked in closes each connection (a warm sandbox).
            pairs = [str(self.config.model_port), posixpath.join(MOUNT, GATEWAY_SOCKET)]
            pairs += [str(self.config.egress_port), posixpath.join(MOUNT, EGRESS_SOCKET)]
            command = [image.python, "-I", "-S", posixpath.join(MOUNT, FORWARDER), *pairs]
        else:
            command = ["sleep", "infinity"]
        host_config = self.api.create_host_config(
            init=True,
            network_mode=network or "none",
            cap_drop=["ALL"],
            cap_add=list(self.config.root_capabilities),
            security_opt=["no-new-privileges"],
            privileged=False,
            pids_limit=limits.pids,
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=limits.nano_cpus,
            binds={
                str(host_dir): {"bind": MOUNT, "mode": "ro"},
                **({image.bundle: {"bind": BUNDLE_MOUNT, "mode": "ro"}} if image.bundle else {}),
            },
        )
        container = self.api.create_container(
            image.id,
            command=command,
            user="root",  # the forwarder only; every command names its user (default: the image's)
            name=name,
            labels=labels.sandbox_labels(rollout_id, self.config.ttl_s, host_dir),
            host_config=host_config,
        )
        if network is not None:
            self.api.disconnect_container_from_network(container["Id"], network)
        self.api.start(container["Id"])
        return container["Id"]

    def discard(self, name: str) -> None:
        """Remove a container by name (if the engine made it) and its host folder; errors are ignored."""
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            self.api.remove_container(name, force=True, v=True)
        shutil.rmtree(self.config.runtime_dir / name, ignore_errors=True)
