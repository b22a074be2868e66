"""One Docker sandbox: commands through the exec API, files through the archive API.

Output is streamed and capped (`CappedOutput`), archives are read as they arrive. A command's timeout runs inside
the sandbox (`timeout -s KILL`), so its process group dies at the deadline even if the runner is gone.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import docker.errors

from agentbake.errors import SandboxError
from agentbake.runner.docker.engine import DockerEngine, ImageInfo
from agentbake.runner.sandbox import BgJob, ExecResult, SandboxHandle
from agentbake.runner.sandbox.copyout import CopyBudget, extract
from agentbake.runner.sandbox.deadline import deadline_argv, deadline_result
from agentbake.runner.sandbox.output import CappedOutput

READ_MAX_BYTES = 64 * 1024 * 1024
"""Largest file `read_bytes` returns (reward files, the diff, /etc/passwd); a larger one is an error."""
_ARCHIVE_CHUNK = 1024 * 1024
_CHANGE_KINDS = {0: "changed", 1: "added", 2: "deleted"}
"""The engine's `Kind` of a diff entry."""
# Creates the missing parents of $1 (shallowest first) and gives only those to $2 (uid:gid).
_MKDIRS = 't=$1; o=$2; set --; while [ ! -e "$t" ]; do set -- "$t" "$@"; t=${t%/*}; t=${t:-/}; done; '
_MKDIRS += '[ $# -eq 0 ] || { mkdir -- "$@" && chown "$o" -- "$@"; }'
# Prints its pid (the job's process group) before becoming the command.
_PID_THEN_EXEC = 'echo "$$"; exec "$@"'


def argv(cmd: str | list[str]) -> list[str]:
    return ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)


class DockerSandbox(SandboxHandle):
    """A started container; made by `DockerBackend.create`, ended by `kill()` (idempotent): `remove`, the
    backend's, removes it and forgets it."""

    def __init__(
        self,
        engine: DockerEngine,
        container_id: str,
        name: str,
        image: ImageInfo,
        user: str,
        envs: Mapping[str, str],
        model_url: str | None,
        rollout_id: str,
        remove: Callable[[DockerSandbox], None],
    ):
        self._engine = engine
        self._api = engine.api
        self._remove = remove
        self.sandbox_id = container_id
        self.name = name
        self.image = image
        self.user = user
        self.home = image.home
        self.paths = dict(image.paths)
        self.git = image.git
        self.python = image.python
        self.model_url = model_url
        self.rollout_id = rollout_id
        self._envs = dict(envs)
        self.killed = False
        self.network: str | None = None
        """The network `connect_network` joins (set by the backend for a rollout whose verifier has one)."""
        self.network_of: DockerSandbox | None = None
        """The sandbox whose network namespace this one shares (a verifier's snapshot: `verifier_sandbox.py`):
        `connect_network` connects that one."""

    def __repr__(self) -> str:
        return f"DockerSandbox({self.name!r}, rollout={self.rollout_id!r})"

    # -- commands ----------------------------------------------------------------------------------

    def _exec_create(self, cmd: list[str], envs: Mapping[str, str] | None, cwd: str | None, user: str | None) -> str:
        environment = [f"{k}={v}" for k, v in {**self._envs, **(envs or {})}.items()]
        try:
            return self._api.exec_create(
                self.sandbox_id, cmd, user=user or self.user, environment=environment, workdir=cwd
            )["Id"]
        except docker.errors.DockerException as exc:
            raise self._error("start a command in", exc) from None

    def _exit_code(self, exec_id: str) -> int:
        for _ in range(50):  # the engine records the code a moment after the output stream closes
            code = self._api.exec_inspect(exec_id)["ExitCode"]
            if code is not None:
                return code
            time.sleep(0.01)
        raise SandboxError(f"{self.name}: the engine reported no exit code for exec {exec_id[:12]}")

    def exec(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        exec_id = self._exec_create(deadline_argv(argv(cmd), timeout), envs, cwd, user)
        started = time.monotonic()
        stdout, stderr = CappedOutput(), CappedOutput()
        try:
            stream = self._engine.stream_api.exec_start(exec_id, stream=True, demux=True)
            try:
                for out, err in stream:
                    if out:
                        stdout.add(out)
                    if err:
                        stderr.add(err)
            finally:
                stream.close()
            code = self._exit_code(exec_id)
        except docker.errors.DockerException as exc:
            raise self._error("run a command in", exc) from None
        return deadline_result(ExecResult(code, stdout.text(), stderr.text()), timeout, started)

    def start_bg(
        self,
        cmd: str | list[str],
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> DockerBgJob:
        exec_id = self._exec_create(["sh", "-c", _PID_THEN_EXEC, "sh", *argv(cmd)], envs, cwd, user)
        try:
            stream = self._engine.stream_api.exec_start(exec_id, stream=True, demux=True)
        except docker.errors.DockerException as exc:
            raise self._error("start a background command in", exc) from None
        return DockerBgJob(self, exec_id, stream)

    # -- files -------------------------------------------------------------------------------------

    def _absolute(self, path: str) -> str:
        if not posixpath.isabs(path):
            raise SandboxError(f"{self.name}: sandbox paths must be absolute (under {self.home}), got {path!r}")
        return posixpath.normpath(path)

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644, user: str | None = None) -> None:
        path = self._absolute(path)
        uid, gid = self._engine.ids(self.image, user or self.user, lambda: self.read_text("/etc/passwd"))
        member = tarfile.TarInfo(posixpath.basename(path))
        member.size, member.mode, member.uid, member.gid = len(data), mode, uid, gid
        member.mtime = int(time.time())
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(member, io.BytesIO(data))
        parent = posixpath.dirname(path)
        try:
            try:
                self._api.put_archive(self.sandbox_id, parent, archive.getvalue())
            except docker.errors.NotFound:
                made = self.exec(["sh", "-c", _MKDIRS, "sh", parent, f"{uid}:{gid}"], user="root")
                if made.exit_code != 0:
                    raise SandboxError(f"{self.name}: cannot create {parent}: {made.stderr.strip()}") from None
                self._api.put_archive(self.sandbox_id, parent, archive.getvalue())
        except docker.errors.DockerException as exc:
            raise self._error(f"write {path} in", exc) from None

    def read_bytes(self, path: str) -> bytes:
        path = self._absolute(path)
        try:
            chunks, stat = self._api.get_archive(self.sandbox_id, path, chunk_size=_ARCHIVE_CHUNK)
        except docker.errors.NotFound:
            raise FileNotFoundError(f"{self.name}: no such file: {path}") from None
        except docker.errors.DockerException as exc:
            raise self._error(f"read {path} from", exc) from None
        try:
            if (stat or {}).get("linkTarget"):
                raise FileNotFoundError(f"{self.name}: {path} is a symlink (to {stat['linkTarget']!r}), not read")
            if int((stat or {}).get("size") or 0) > READ_MAX_BYTES:
                raise SandboxError(f"{self.name}: {path} is {stat['size']} bytes, more than {READ_MAX_BYTES} read")
            archive = io.BytesIO(b"".join(chunks))
        finally:
            chunks.close()  # an archive left half read holds the container's lock in the engine
        with tarfile.open(fileobj=archive) as tar:
            member = tar.next()
            if member is None or member.isdir():
                raise IsADirectoryError(f"{self.name}: {path} is a directory")
            extracted = tar.extractfile(member) if member.isreg() else None
            if extracted is None:
                raise FileNotFoundError(f"{self.name}: {path} is not a regular file")
            return extracted.read()

    def copy_out(self, path: str, dest: Path, budget: CopyBudget) -> None:
        path = self._absolute(path)
        try:
            chunks, _stat = self._api.get_archive(self.sandbox_id, path, chunk_size=_ARCHIVE_CHUNK)
        except docker.errors.NotFound:
            return
        except docker.errors.DockerException as exc:
            raise self._error(f"read {path} from", exc) from None
        try:
            extract(chunks, dest, budget, source=path)
        finally:
            chunks.close()  # the rest is never read: closing the response releases the container in the engine

    def disk_usage(self) -> int | None:
        """The writable layer's size as the engine measures it (apparent sizes: a sparse file counts in full)."""
        try:
            found = self._api.containers(all=True, filters={"id": self.sandbox_id}, size=True)
        except docker.errors.DockerException as exc:
            raise self._error("measure the disk use of", exc) from None
        return int(found[0].get("SizeRw") or 0) if found else None

    def changed_files(self) -> list[tuple[str, str]] | None:
        """The engine's diff of the container's writable layer against its image."""
        try:
            changes = self._api.diff(self.sandbox_id) or []
        except docker.errors.DockerException as exc:
            raise self._error("list the changed files of", exc) from None
        return [(_CHANGE_KINDS.get(change["Kind"], "changed"), change["Path"]) for change in changes]

    def link_target(self, path: str) -> str | None:
        """The engine's stat of `path` (the archive's header); its stream is closed unread."""
        try:
            chunks, stat = self._api.get_archive(self.sandbox_id, self._absolute(path), chunk_size=_ARCHIVE_CHUNK)
        except docker.errors.NotFound:
            return None
        except docker.errors.DockerException as exc:
            raise self._error(f"look at {path} in", exc) from None
        chunks.close()  # an archive left open holds the container's lock in the engine
        return (stat or {}).get("linkTarget") or None

    def restart(self) -> None:
        """Kill the container's init, then start it again with its files as they were and a fresh relay. A stopped
        container is only started."""
        try:
            try:
                self._api.kill(self.sandbox_id)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: not running
                    raise
            self._api.wait(self.sandbox_id, timeout=60)
            self._api.start(self.sandbox_id)
        except docker.errors.DockerException as exc:
            raise self._error("restart", exc) from None

    def connect_network(self) -> None:
        if self.network_of is not None:
            self.network_of.connect_network()
            return
        if self.network is None:
            raise SandboxError(f"sandbox {self.name} was not made for a network (SandboxRequest.verifier_network)")
        try:
            self._api.connect_container_to_network(self.sandbox_id, self.network)
        except docker.errors.DockerException as exc:
            raise self._error(f"connect the network {self.network!r} to", exc) from None

    def exists(self, path: str) -> bool:
        return self.exec(["test", "-e", self._absolute(path)], user="root").exit_code == 0

    # -- lifetime ----------------------------------------------------------------------------------

    def kill(self) -> None:
        self._remove(self)

    def _error(self, action: str, exc: Exception) -> SandboxError:
        gone = " (the sandbox was killed)" if self.killed else ""
        return SandboxError(f"cannot {action} sandbox {self.name}{gone}: {exc}")


class DockerBgJob(BgJob):
    """A command streaming into a reader thread; `pid` is its process group inside the sandbox."""

    pid: int = 0

    def __init__(self, sandbox: DockerSandbox, exec_id: str, stream: Iterator[tuple[bytes | None, bytes | None]]):
        self._sandbox = sandbox
        self._exec_id = exec_id
        self._stdout = CappedOutput()
        self._stderr = CappedOutput()
        self._started = threading.Event()
        self._error: Exception | None = None
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True, name=f"bg-{exec_id[:12]}")
        self._reader.start()
        self._started.wait()
        if self._error is not None or self.pid <= 0:
            said = self._error or (self._stdout.text() + self._stderr.text()).strip()
            raise SandboxError(f"background command in {sandbox.name} did not start: {said}")

    def _read(self, stream: Iterator[tuple[bytes | None, bytes | None]]) -> None:
        head = bytearray()
        try:
            for out, err in stream:
                if err:
                    self._stderr.add(err)
                if not out:
                    continue
                if self._started.is_set():
                    self._stdout.add(out)
                    continue
                head += out
                line, newline, rest = bytes(head).partition(b"\n")
                if newline:
                    if line.isdigit():
                        self.pid = int(line)
                        self._stdout.add(rest)
                    else:  # the engine's own message: the command never started
                        self._stdout.add(bytes(head))
                    self._started.set()
        except Exception as exc:  # the engine went away: wait() reports it
            self._error = exc
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # the exec's connection, now at its end
            self._started.set()

    @property
    def done(self) -> bool:
        return not self._reader.is_alive()

    def wait(self, timeout: float | None = None) -> ExecResult:
        self._reader.join(timeout)
        if self._reader.is_alive():
            raise TimeoutError(f"background command {self.pid} in {self._sandbox.name} still runs after {timeout} s")
        if self._error is not None:
            raise self._sandbox._error("read a background command's output from", self._error)
        try:
            code = self._sandbox._exit_code(self._exec_id)
        except docker.errors.DockerException as exc:
            raise self._sandbox._error("read a background command's exit code from", exc) from None
        return ExecResult(code, self._stdout.text(), self._stderr.text())

    def kill(self) -> None:
        if self.done or self._sandbox.killed:
            return
        self._sandbox.exec(["sh", "-c", f"kill -s KILL -- -{self.pid} 2>/dev/null || true"], user="root")
        self._reader.join(5)
