"""A loopback E2B: the control plane (`E2B_API_URL`) and envd, the in-sandbox daemon (`E2B_SANDBOX_URL`).

The `e2b` SDK talks to it unchanged: sandbox create/kill over its REST API; commands over envd's
Connect-RPC `process.Process` service (served by the SDK's own generated ASGI application, so the wire
format is the SDK's); `exists` over `filesystem.Filesystem/Stat`; file contents over envd's `/files` HTTP
API. Each sandbox is a local container (`LocalMachines`). The SDK addresses envd by the `E2b-Sandbox-Id`
header when `E2B_SANDBOX_URL` names one URL for all sandboxes, which is how one server serves them all.
"""

from __future__ import annotations

import asyncio
import base64
import email.parser
import email.policy
import json
import secrets
import threading
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_pb
from e2b.envd.filesystem.filesystem_connect import Filesystem, FilesystemASGIApplication
from e2b.envd.process import process_pb
from e2b.envd.process.process_connect import Process, ProcessASGIApplication
from protobuf import Oneof

from tests.runner.fakes.containers import LocalMachines, Machine

ENVD_VERSION = "0.5.7"


@dataclass
class FakeSandbox:
    sandbox_id: str
    template: str
    machine: Machine
    metadata: dict[str, str]
    envs: dict[str, str]
    default_user: str
    running: set[int] = field(default_factory=set)


@dataclass
class StartSeen:
    """What one `process.Process/Start` call asked for (the tests check deadlines and users on it)."""

    sandbox_id: str
    user: str
    cmd: list[str]
    timeout_ms: float | None
    envs: dict[str, str]


class FakeE2B:
    """Counts what it creates and kills; `fail_creates` (HTTP statuses) answers the next creates with errors."""

    def __init__(self, machines: LocalMachines, templates: dict[str, tuple[str, str]]) -> None:
        self.machines = machines
        self.templates = templates
        """Template `name:tag` -> (local image, the template's default user)."""
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.created = 0
        self.killed = 0
        self.create_bodies: list[dict[str, Any]] = []
        self.network_updates: list[tuple[str, dict[str, Any]]] = []
        """(sandbox id, body) of each egress-rules update; the local containers do not enforce them."""
        self.starts: list[StartSeen] = []
        self.fail_creates: list[int] = []
        self.fail_creates_after_start: list[int] = []
        """Statuses to answer creates with *after* the sandbox started (a lost answer); idempotency replays it."""
        self.fail_kills = 0
        self.fail_starts_after: int | None = None
        """Refuse every command after this many (the sandbox's daemon stops answering mid-rollout)."""
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        self._process = ProcessASGIApplication(_Process(self))
        self._filesystem = FilesystemASGIApplication(_Filesystem(self))

    @property
    def alive(self) -> int:
        with self._lock:
            return len(self.sandboxes)

    def env(self, url: str) -> dict[str, str]:
        """The variables that point the SDK at this fake."""
        return {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": "e2b_fake_key", "E2B_DEBUG": "false"}

    def sandbox(self, headers: dict[str, str]) -> FakeSandbox:
        sandbox_id = headers.get("e2b-sandbox-id", "")
        with self._lock:
            found = self.sandboxes.get(sandbox_id)
        if found is None:
            raise ConnectError(Code.UNAVAILABLE, f"sandbox {sandbox_id!r} not found")
        return found

    # -- ASGI --------------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        path = scope["path"]
        if path.startswith("/process.Process/"):
            return await self._process(scope, receive, send)
        if path.startswith("/filesystem.Filesystem/"):
            return await self._filesystem(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = dict(urllib.parse.parse_qsl(scope.get("query_string", b"").decode()))
        status, content_type, payload = await asyncio.to_thread(self._http, scope["method"], path, headers, query, body)
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type.encode())]}
        )
        await send({"type": "http.response.body", "body": payload})

    def _http(
        self, method: str, path: str, headers: dict[str, str], query: dict[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        parts = path.strip("/").split("/")
        if method == "POST" and path == "/v2/sandboxes":
            return self._create(json.loads(body or b"{}"), headers.get("idempotency-key"))
        if method == "DELETE" and len(parts) == 2 and parts[0] == "sandboxes":
            return self._kill(parts[1])
        if method == "PUT" and len(parts) == 3 and parts[0] == "sandboxes" and parts[2] == "network":
            self.network_updates.append((parts[1], json.loads(body or b"{}")))  # recorded: containers keep theirs
            return 204, "application/json", b""
        if path == "/health":
            return 204, "text/plain", b""
        if path == "/files":
            return self._files(method, headers, query, body)
        return _error(404, f"fake E2B: no route {method} {path}")

    def _create(self, body: dict[str, Any], key: str | None) -> tuple[int, str, bytes]:
        self.create_bodies.append(body)
        if key and key in self._by_key and self._by_key[key] in self.sandboxes:
            return 201, "application/json", self._created(self.sandboxes[self._by_key[key]])
        if self.fail_creates:
            return _error(self.fail_creates.pop(0), "injected failure")
        template = body.get("templateID", "")
        if template not in self.templates:
            return _error(404, f"template '{template}' not found")
        image, user = self.templates[template]
        envs = dict(body.get("envVars") or {})
        machine = self.machines.start(image, envs)
        sandbox = FakeSandbox(
            f"fake{secrets.token_hex(6)}", template, machine, dict(body.get("metadata") or {}), envs, user
        )
        with self._lock:
            self.sandboxes[sandbox.sandbox_id] = sandbox
            self.created += 1
            if key:
                self._by_key[key] = sandbox.sandbox_id
        if self.fail_creates_after_start:
            return _error(self.fail_creates_after_start.pop(0), "injected failure after start")
        return 201, "application/json", self._created(sandbox)

    @staticmethod
    def _created(sandbox: FakeSandbox) -> bytes:
        return json.dumps(
            {
                "templateID": sandbox.template,
                "sandboxID": sandbox.sandbox_id,
                "clientID": "fake",
                "envdVersion": ENVD_VERSION,
            }
        ).encode()

    def _kill(self, sandbox_id: str) -> tuple[int, str, bytes]:
        if self.fail_kills:
            self.fail_kills -= 1
            return _error(500, "injected kill failure")
        with self._lock:
            sandbox = self.sandboxes.pop(sandbox_id, None)
        if sandbox is None:
            return _error(404, f"sandbox {sandbox_id} not found")
        self.machines.remove(sandbox.machine)
        with self._lock:
            self.killed += 1
        return 204, "application/json", b""

    def _files(
        self, method: str, headers: dict[str, str], query: dict[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        try:
            sandbox = self.sandbox(headers)
        except ConnectError as exc:
            return _error(502, exc.message)
        user = query.get("username") or sandbox.default_user
        path = query.get("path", "")
        if method == "GET":
            try:
                return 200, "application/octet-stream", self.machines.read(sandbox.machine, path)
            except FileNotFoundError:
                return _error(404, f"path '{path}' does not exist")
            except IsADirectoryError:
                return _error(400, f"path '{path}' is a directory")
        if method == "POST":
            for name, data in _multipart_files(headers.get("content-type", ""), body):
                target = path or name
                try:
                    self.machines.write(sandbox.machine, target, data, user=user)
                except PermissionError as exc:
                    return _error(403, str(exc))
            entry = {"name": path.rsplit("/", 1)[-1], "type": "file", "path": path}
            return 200, "application/json", json.dumps([entry]).encode()
        return _error(405, method)


async def lifespan(receive: Any, send: Any) -> None:
    """Answer uvicorn's startup and shutdown (nothing to set up)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _error(status: int, message: str) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps({"code": status, "message": message}).encode()


def _multipart_files(content_type: str, body: bytes) -> list[tuple[str, bytes]]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    return [(part.get_filename() or "", part.get_payload(decode=True) or b"") for part in message.iter_parts()]


def _user(headers: Any, default: str) -> str:
    auth = headers.get("authorization") or ""
    if auth.lower().startswith("basic "):
        return base64.b64decode(auth[6:]).decode().split(":", 1)[0] or default
    return default


class _Process(Process):
    """envd's process service over local containers (the other methods answer UNIMPLEMENTED)."""

    def __init__(self, fake: FakeE2B) -> None:
        self.fake = fake

    async def start(self, request: process_pb.StartRequest, ctx: Any) -> AsyncIterator[process_pb.StartResponse]:
        sandbox = self.fake.sandbox(dict(ctx.request_headers.items()))
        config = request.process
        user = _user(ctx.request_headers, sandbox.default_user)
        argv = [config.cmd, *config.args]
        envs = dict(config.envs)
        self.fake.starts.append(StartSeen(sandbox.sandbox_id, user, argv, ctx.timeout_ms, envs))
        if self.fake.fail_starts_after is not None and len(self.fake.starts) > self.fake.fail_starts_after:
            raise ConnectError(Code.UNAVAILABLE, "injected: the sandbox stopped answering")
        machines = self.fake.machines
        run = await asyncio.to_thread(
            machines.start_run, sandbox.machine, argv, user=user, envs=envs, cwd=config.cwd or None
        )
        sandbox.running.add(run.pid)
        yield _event("start", process_pb.ProcessEvent.StartEvent(pid=run.pid))
        queue: asyncio.Queue[tuple[bytes | None, bytes | None] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def pump() -> None:
            try:
                for chunk in run.chunks:
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        threading.Thread(target=pump, daemon=True).start()
        while (chunk := await queue.get()) is not None:
            out, err = chunk
            if out:
                yield _event("data", process_pb.ProcessEvent.DataEvent(output=Oneof("stdout", out)))
            if err:
                yield _event("data", process_pb.ProcessEvent.DataEvent(output=Oneof("stderr", err)))
        code = await asyncio.to_thread(machines.exit_code, run.exec_id)
        sandbox.running.discard(run.pid)
        end = process_pb.ProcessEvent.EndEvent(exit_code=code, exited=True, status=f"exit status {code}")
        yield _event("end", end)

    async def send_signal(self, request: process_pb.SendSignalRequest, ctx: Any) -> process_pb.SendSignalResponse:
        sandbox = self.fake.sandbox(dict(ctx.request_headers.items()))
        selector = request.process.selector if request.process else None
        if selector is None or selector.field != "pid":
            raise ConnectError(Code.INVALID_ARGUMENT, "fake envd: signals by pid only")
        await asyncio.to_thread(self.fake.machines.kill_group, sandbox.machine, selector.value)
        return process_pb.SendSignalResponse()


class _Filesystem(Filesystem):
    """envd's filesystem service: `Stat` (what `files.exists` calls)."""

    def __init__(self, fake: FakeE2B) -> None:
        self.fake = fake

    async def stat(self, request: filesystem_pb.StatRequest, ctx: Any) -> filesystem_pb.StatResponse:
        sandbox = self.fake.sandbox(dict(ctx.request_headers.items()))
        found = await asyncio.to_thread(self.fake.machines.stat, sandbox.machine, request.path)
        if found is None:
            raise ConnectError(Code.NOT_FOUND, f"path '{request.path}' does not exist")
        kind, size = found
        types = {"dir": filesystem_pb.FileType.DIRECTORY, "symlink": filesystem_pb.FileType.SYMLINK}
        entry = filesystem_pb.EntryInfo(
            name=request.path.rsplit("/", 1)[-1],
            type=types.get(kind, filesystem_pb.FileType.FILE),
            path=request.path,
            size=size,
        )
        return filesystem_pb.StatResponse(entry=entry)


def _event(kind: str, value: Any) -> process_pb.StartResponse:
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=Oneof(kind, value)))
