"""Local containers standing in for remote sandboxes: root by default, the image's home, no labels read.

A fake control plane starts one per sandbox it creates; its data plane runs commands and moves files here.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import tarfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import docker
import docker.errors

from agentbake.runner.remote.image_facts import ImageFacts

FAKE_LABEL = "dev.agentbake.test.fake-remote"
"""Marks the containers a fake started with its `LocalMachines`' own value, so a test removes exactly what
it left (other test runs on the same engine keep theirs)."""
# Prints the command's pid (its process group: every exec leads its own session) before becoming it.
_PID_THEN_EXEC = 'echo "$$"; exec "$@"'


@dataclass
class Machine:
    """One started container."""

    container_id: str
    image: str
    envs: dict[str, str] = field(default_factory=dict)


@dataclass
class Run:
    """A command running in a machine: its pid, its output as it comes, then its exit code."""

    pid: int
    chunks: Iterator[tuple[bytes | None, bytes | None]]
    exec_id: str


class LocalMachines:
    """Starts, runs commands in, and removes the fakes' containers."""

    def __init__(self, *, network_mode: str = "none") -> None:
        self.api = docker.APIClient(timeout=120)
        self.stream_api = docker.APIClient(timeout=None, version=self.api.api_version)
        self.network_mode = network_mode
        self.label = secrets.token_hex(8)
        self._lock = threading.Lock()
        self.machines: dict[str, Machine] = {}

    def start(self, image: str, envs: Mapping[str, str] | None = None) -> Machine:
        try:
            self.api.inspect_image(image)
        except docker.errors.ImageNotFound:  # a cloud pulls the reference it is given (the test registry's)
            self.api.pull(image)
        host_config = self.api.create_host_config(init=True, network_mode=self.network_mode)
        container = self.api.create_container(
            image,
            command=["sleep", "infinity"],
            user="root",
            name=f"agentbake-fake-remote-{secrets.token_hex(5)}",
            labels={FAKE_LABEL: self.label},
            host_config=host_config,
            environment=dict(envs or {}),
        )
        try:
            self.api.start(container["Id"])
        except docker.errors.DockerException:
            self.api.remove_container(container["Id"], force=True)
            raise
        machine = Machine(container["Id"], image, dict(envs or {}))
        with self._lock:
            self.machines[machine.container_id] = machine
        return machine

    def remove(self, machine: Machine) -> None:
        with self._lock:
            self.machines.pop(machine.container_id, None)
        with contextlib.suppress(docker.errors.NotFound):
            self.api.remove_container(machine.container_id, force=True, v=True)

    def remove_all(self) -> None:
        for machine in list(self.machines.values()):
            self.remove(machine)

    # -- commands ----------------------------------------------------------------------------------

    def start_run(
        self, machine: Machine, argv: list[str], *, user: str, envs: Mapping[str, str], cwd: str | None
    ) -> Run:
        environment = [f"{k}={v}" for k, v in {**machine.envs, **envs}.items()]
        exec_id = self.api.exec_create(
            machine.container_id,
            ["sh", "-c", _PID_THEN_EXEC, "sh", *argv],
            user=user,
            environment=environment,
            workdir=cwd or None,
        )["Id"]
        stream = self.stream_api.exec_start(exec_id, stream=True, demux=True)
        head = bytearray()
        rest_err = bytearray()
        for out, err in stream:
            if err:
                rest_err += err
            if out:
                head += out
                line, newline, rest = bytes(head).partition(b"\n")
                if newline:
                    return Run(int(line), _prepend(rest, bytes(rest_err), stream), exec_id)
        code = self.exit_code(exec_id)
        raise RuntimeError(f"command did not start (exit {code}): {bytes(rest_err).decode(errors='replace')}")

    def exit_code(self, exec_id: str) -> int:
        for _ in range(200):
            code = self.api.exec_inspect(exec_id)["ExitCode"]
            if code is not None:
                return code
            threading.Event().wait(0.01)
        raise RuntimeError(f"no exit code for exec {exec_id[:12]}")

    def run(self, machine: Machine, argv: list[str], *, user: str = "root") -> tuple[int, bytes, bytes]:
        """Run a short command to its end (the fakes' own bookkeeping)."""
        exec_id = self.api.exec_create(machine.container_id, argv, user=user)["Id"]
        out, err = self.stream_api.exec_start(exec_id, demux=True)
        return self.exit_code(exec_id), out or b"", err or b""

    def kill_group(self, machine: Machine, pid: int) -> None:
        self.run(machine, ["sh", "-c", f"kill -s KILL -- -{pid} 2>/dev/null || kill -s KILL {pid} 2>/dev/null; true"])

    # -- files -------------------------------------------------------------------------------------

    def write(self, machine: Machine, path: str, data: bytes, *, user: str, mode: int = 0o644) -> None:
        """Write as `user` would: parents made by the user, the file owned by it."""
        parent = path.rsplit("/", 1)[0] or "/"
        code, _, err = self.run(machine, ["mkdir", "-p", parent], user=user)
        if code != 0:
            raise PermissionError(err.decode(errors="replace").strip())
        code, out, _ = self.run(machine, ["id", "-u", user])
        uid = int(out.strip() or 0)
        code, out, _ = self.run(machine, ["id", "-g", user])
        gid = int(out.strip() or 0)
        member = tarfile.TarInfo(path.rsplit("/", 1)[1])
        member.size, member.mode, member.uid, member.gid = len(data), mode, uid, gid
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.addfile(member, io.BytesIO(data))
        self.api.put_archive(machine.container_id, parent, archive.getvalue())

    def read(self, machine: Machine, path: str) -> bytes:
        try:
            chunks, _ = self.api.get_archive(machine.container_id, path)
        except docker.errors.NotFound:
            raise FileNotFoundError(path) from None
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member is not None else None
            if extracted is None:
                raise IsADirectoryError(path)
            return extracted.read()

    def stat(self, machine: Machine, path: str) -> tuple[str, int] | None:
        """(`file`|`dir`|`symlink`, size), or None when nothing is there."""
        code, out, _ = self.run(machine, ["stat", "-c", "%F|%s", path])
        if code != 0:
            return None
        kind, _, size = out.decode().strip().partition("|")
        name = "dir" if kind == "directory" else "symlink" if kind == "symbolic link" else "file"
        return name, int(size or 0)


def _prepend(
    out: bytes, err: bytes, stream: Iterator[tuple[bytes | None, bytes | None]]
) -> Iterator[tuple[bytes | None, bytes | None]]:
    if out or err:
        yield (out or None, err or None)
    yield from stream


def remove_leftovers(machines: LocalMachines) -> int:
    """Remove every container `machines` started that is still there (a failed test may have left some);
    returns how many."""
    client = docker.APIClient(timeout=60)
    found = client.containers(all=True, filters={"label": f"{FAKE_LABEL}={machines.label}"})
    for container in found:
        client.remove_container(container["Id"], force=True, v=True)
    return len(found)


def facts_of(engine: docker.DockerClient, tag: str, **overrides: str) -> ImageFacts:
    """The image facts a remote backend reads from the local engine (labels overridden for a test)."""
    labels = dict(engine.images.get(tag).labels or {})
    labels.update({f"dev.agentbake.{key}": value for key, value in overrides.items()})
    return ImageFacts.from_labels(tag, labels)
