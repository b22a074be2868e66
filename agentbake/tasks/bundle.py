"""The agent bundle: an agent image's agent, plus a python and a git for the harness, in one Docker volume that
task-image sandboxes mount read-only at /opt/agentbake.

It is made once per agent image (`bundle_script.sh`, no network) and shared by every task, instead of installing per
trial or layering the agent onto each task image. Its python and git run on the bundle's own glibc loader. The
filling container is kept as the record that the volume is complete; its name is the bundle's, so two processes
filling the same bundle meet in the engine and the second waits.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from agentbake.buildkit.builders import Progress, seconds_since
from agentbake.errors import AgentError

BUNDLE_MOUNT = "/opt/agentbake"
"""Where the bundle volume is mounted (read-only) in a task-image sandbox."""
AGENT_BIN = f"{BUNDLE_MOUNT}/bin"
"""The agent's command; added to the agent's PATH only (after the task image's own PATH)."""
BUNDLE_PYTHON = f"{BUNDLE_MOUNT}/runtime/bin/python3"
"""The python that runs the relay to the gateway (forwarder.py)."""
BUNDLE_GIT = f"{BUNDLE_MOUNT}/runtime/bin/git"
"""The git of the harness's workdir snapshot and diff."""
BUNDLE_LABEL = "dev.agentbake.bundle"
"""On the bundle's volume and container: the agent image id it was made from."""
FILL_TIMEOUT_S = 600.0
_STARTING_S = 10.0
_FILL_ATTEMPTS = 5
"""How long a filling container another process created may take to start before it counts as abandoned."""
_SCRIPT = Path(__file__).with_name("bundle_script.sh")
_COMMAND_LABEL = "dev.agentbake.agent.command"
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class AgentBundle:
    """A ready bundle volume."""

    volume: str
    """The Docker volume's name (also its filling container's)."""
    agent_image_id: str
    """The catalog agent image it was made from."""
    created: bool
    """False when it already existed."""
    seconds: float


def bundle_name(agent_image_id: str) -> str:
    """`agentbake-bundle-<hash12>` over the agent image id and the script that fills it."""
    digest = hashlib.sha256(agent_image_id.encode() + b"\0" + _SCRIPT.read_bytes()).hexdigest()
    return f"agentbake-bundle-{digest[:12]}"


def ensure_bundle(client: docker.DockerClient, agent_image: str, *, progress: Progress | None = None) -> AgentBundle:
    """The bundle of `agent_image` (a catalog agent image on this engine), made when missing."""
    started = time.monotonic()
    try:
        attrs = client.api.inspect_image(agent_image)
    except docker.errors.ImageNotFound:
        raise AgentError(
            f"agent image {agent_image!r} is not on this engine; build it with `agentbake build`"
        ) from None
    command = ((attrs.get("Config") or {}).get("Labels") or {}).get(_COMMAND_LABEL)
    if not command:
        raise AgentError(
            f"image {agent_image!r} has no label {_COMMAND_LABEL}: only a catalog agent image (built by "
            "`agentbake build`) can be layered onto a task image"
        )
    name = bundle_name(attrs["Id"])
    with _lock(name):
        created = False
        for _ in range(_FILL_ATTEMPTS):
            if _ready(client, name):
                break
            created = _fill(client, name, attrs["Id"], command, progress or Progress()) or created
        else:  # the last fill may have been the one that made it
            if not _ready(client, name):
                raise AgentError(
                    f"the agent bundle {name} could not be made in {_FILL_ATTEMPTS} tries: its volume stays in use "
                    "without the container that records it; remove what uses it "
                    f"(`docker ps -a --filter volume={name}`)"
                )
    return AgentBundle(name, attrs["Id"], created, seconds_since(started))


def _lock(name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


def _ready(client: docker.DockerClient, name: str) -> bool:
    """True when the filling container exited 0. A running one is waited for; a failed one is removed with its volume,
    so the caller fills it anew."""
    try:
        state = client.api.inspect_container(name)["State"]
        deadline = time.monotonic() + _STARTING_S
        while state.get("Status") == "created" and time.monotonic() < deadline:  # another process starts it
            time.sleep(0.2)
            state = client.api.inspect_container(name)["State"]
    except docker.errors.NotFound:
        return False
    if state.get("Running"):
        client.api.wait(name, timeout=FILL_TIMEOUT_S)
        state = client.api.inspect_container(name)["State"]
    if state.get("Status") == "exited" and state.get("ExitCode") == 0:
        return True
    _remove(client, name)
    return False


def _fill(client: docker.DockerClient, name: str, image_id: str, command: str, progress: Progress) -> bool:
    """Fill the volume in a container named after it; False when another process took the name first."""
    labels = {BUNDLE_LABEL: image_id}
    try:  # a volume left without its filling container (a prune stopped halfway) holds unknown files
        client.api.remove_volume(name)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError:  # in use: another process's filling container has just taken it
        time.sleep(1)
        return False
    client.api.create_volume(name, labels=labels)
    try:
        container = create_named(
            client,
            image_id,
            ["bash", "-c", _SCRIPT.read_text(), "bundle_script.sh", command],
            name,
            binds={name: {"bind": "/bundle", "mode": "rw"}},
            cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER"],
            labels=labels,
        )
    except docker.errors.APIError as exc:
        raise AgentError(f"cannot create the agent bundle {name}: {exc}") from None
    if container is None:
        return False
    progress.step(1, 1, f"agent bundle {name}: copying the agent, python and git (once per agent image)")
    try:
        code, tail = run_to_exit(client, container, FILL_TIMEOUT_S)
    except Exception:
        _remove(client, name)
        raise
    if code != 0:
        _remove(client, name)
        raise AgentError(f"making the agent bundle {name} from {image_id[:19]} failed (exit {code}): {tail}")
    return True


def create_named(
    client: docker.DockerClient,
    image: str,
    command: list[str],
    name: str,
    *,
    binds: dict[str, dict[str, str]],
    cap_add: list[str],
    labels: dict[str, str] | None = None,
) -> str | None:
    """A one-shot root container with no network and only `cap_add`, its id; None when another process's container
    holds `name` (the name is the lock two processes making the same thing meet at)."""
    host_config = client.api.create_host_config(network_mode="none", binds=binds, cap_drop=["ALL"], cap_add=cap_add)
    try:
        created = client.api.create_container(
            image, command=command, entrypoint=[], user="root", name=name, labels=labels, host_config=host_config
        )
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            return None
        raise
    return created["Id"]


def run_to_exit(client: docker.DockerClient, container: str, timeout_s: float) -> tuple[int, str]:
    """Start a created container and wait for it: its exit code, and when that is not 0 its last log lines."""
    client.api.start(container)
    code = client.api.wait(container, timeout=timeout_s)["StatusCode"]
    tail = client.api.logs(container, tail=10).decode(errors="replace").strip() if code != 0 else ""
    return code, tail


def _remove(client: docker.DockerClient, name: str) -> None:
    """The filling container, then its volume (a volume in use by a container cannot be removed)."""
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_container(name, force=True)
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_volume(name, force=True)
