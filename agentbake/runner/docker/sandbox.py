"""One Docker sandbox: commands through the exec API, files through the archive API.

A command with a timeout runs under coreutils `timeout -s KILL`, inside the sandbox: the command and
every process of its process group die at the deadline even if this process is gone by then. (Each
exec is its own session and process-group leader; a process that calls setsid itself escapes, and
the harness's stop-the-agent step covers that.)
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import docker.errors

from agentbake.errors import SandboxError
from agentbake.runner.docker.engine import DockerEngine, ImageInfo
from agentbake.runner.sandbox import BgJob, ExecResult, SandboxHandle

TIMEOUT_EXIT = 124
# Creates the missing parents of $1 (shallowest first) and gives only those to $2 (uid:gid).
_MKDIRS = 't=$1; o=$2; set --; while [ ! -e "$t" ]; do set -- "$t" "$@"; t=${t%/*}; t=${t:-/}; done; '
_MKDIRS += '[ $# -eq 0 ] || { mkdir -- "$@" && chown "$o" -- "$@"; }'
# Prints its pid (the job's process group) before becoming the command.
_PID_THEN_EXEC = 'echo "$$"; exec "$@"'


def argv(cmd: str | list[str]) -> list[str]:
    return ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)


def _decode(data: bytes | None) -> str:
    return (data or b"").decode(errors="replace")


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
        self.model_url = model_url
        self.rollout_id = rollout_id
        self._envs = dict(envs)
        self.killed = False

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
        command = argv(cmd)
        if timeout is not None:
            if timeout <= 0:
                raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
            command = ["timeout", "-s", "KILL", f"{timeout:g}", *command]
        exec_id = self._exec_create(command, envs, cwd, user)
        started = time.monotonic()
        try:
            stdout, stderr = self._engine.stream_api.exec_start(exec_id, demux=True)
            code = self._exit_code(exec_id)
        except docker.errors.DockerException as exc:
            raise self._error("run a command in", exc) from None
        # `timeout -s KILL` kills its own process group too, so a deadline shows as SIGKILL (137)
        if timeout is not None and code == 137 and time.monotonic() - started >= timeout:
            return ExecResult(TIMEOUT_EXIT, _decode(stdout), _decode(stderr), timed_out=True)
        return ExecResult(code, _decode(stdout), _decode(stderr))

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
            chunks, _stat = self._api.get_archive(self.sandbox_id, path)
            archive = io.BytesIO(b"".join(chunks))
        except docker.errors.NotFound:
            raise FileNotFoundError(f"{self.name}: no such file: {path}") from None
        except docker.errors.DockerException as exc:
            raise self._error(f"read {path} from", exc) from None
        with tarfile.open(fileobj=archive) as tar:
            member = tar.next()
            if member is None or member.isdir():
                raise IsADirectoryError(f"{self.name}: {path} is a directory")
            extracted = tar.extractfile(member)
            if extracted is None:  # a symlink's target lies outside what the engine sent
                raise FileNotFoundError(f"{self.name}: {path} is not a regular file")
            return extracted.read()

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
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._started = threading.Event()
        self._error: Exception | None = None
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True, name=f"bg-{exec_id[:12]}")
        self._reader.start()
        self._started.wait()
        if self._error is not None or self.pid <= 0:
            said = self._error or _decode(bytes(self._stdout + self._stderr)).strip()
            raise SandboxError(f"background command in {sandbox.name} did not start: {said}")

    def _read(self, stream: Iterator[tuple[bytes | None, bytes | None]]) -> None:
        head = bytearray()
        try:
            for out, err in stream:
                if err:
                    self._stderr += err
                if not out:
                    continue
                if self._started.is_set():
                    self._stdout += out
                    continue
                head += out
                line, newline, rest = bytes(head).partition(b"\n")
                if newline:
                    if line.isdigit():
                        self.pid = int(line)
                        self._stdout += rest
                    else:  # the engine's own message: the command never started
                        self._stdout += head
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
        return ExecResult(code, _decode(bytes(self._stdout)), _decode(bytes(self._stderr)))

    def kill(self) -> None:
        if self.done or self._sandbox.killed:
            return
        self._sandbox.exec(["sh", "-c", f"kill -s KILL -- -{self.pid} 2>/dev/null || true"], user="root")
        self._reader.join(5)
