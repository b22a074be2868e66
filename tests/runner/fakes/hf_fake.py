"""A loopback Hugging Face Hub: the Jobs API (`HF_ENDPOINT`) and the sandbox server each sandbox job runs.

`huggingface_hub.Sandbox` runs unchanged against it: `create` is whoami + `run_job` + polling the job's
exposed server's `/health`; `kill` is `cancel_job`; commands are `/v1/exec` (NDJSON events) and
`/v1/processes`; files are `/v1/files/*`. Each job is a local container (`LocalMachines`) in which every
command runs as root, as on Hugging Face.

Recorded behaviour of the real sandbox server, reproduced here: a command past its timeout has its process
group killed and its exit event says `exit_code: null, timed_out: true`; `processes()` lists background
processes with `running` and `exit_code` (`vanish_processes` drops ended ones from the listing, as a
restarted server does); the server's own credential (`SBX_TOKEN`, a job secret) is in the environment every
command inherits. The real server is https on a per-job host; the fake exposes an http loopback URL, which
`Sandbox.create` accepts (only pooled and reconnected sandboxes insist on https).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from tests.runner.fakes.containers import LocalMachines, Machine
from tests.runner.fakes.e2b_fake import lifespan

SERVER_PORT = 49983
PROTOCOL = 3
ENDED = ("COMPLETED", "ERROR", "DELETED", "CANCELED")


@dataclass
class Background:
    id: str
    pid: int
    cmd: Any
    running: bool = True
    exit_code: int | None = None


@dataclass
class FakeJob:
    job_id: str
    spec: dict[str, Any]
    machine: Machine | None
    token: str
    stage: str = "RUNNING"
    processes: dict[str, Background] = field(default_factory=dict)


class FakeHub:
    """Counts the sandbox jobs it runs and cancels; `fail_creates` answers the next `run_job` calls with errors."""

    def __init__(self, machines: LocalMachines, *, namespace: str = "fake-user") -> None:
        self.machines = machines
        self.namespace = namespace
        self.jobs: dict[str, FakeJob] = {}
        self.created = 0
        self.killed = 0
        self.fail_creates: list[int] = []
        self.fail_health = False
        """The sandbox server never answers /health (a job that does not come up)."""
        self.fail_cancels = 0
        self.vanish_processes = False
        self.fail_execs_after: int | None = None
        """Answer 502 to every command after this many (the sandbox server stops answering mid-rollout)."""
        self.execs: list[dict[str, Any]] = []
        self.url = ""
        self._lock = threading.Lock()

    @property
    def alive(self) -> int:
        with self._lock:
            return sum(job.stage == "RUNNING" for job in self.jobs.values())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = dict(urllib.parse.parse_qsl(scope.get("query_string", b"").decode()))
        path, method = scope["path"], scope["method"]
        if path.startswith("/jobs/") and path.endswith("/v1/exec"):
            return await self._exec(path, headers, json.loads(body), send)
        status, payload = await asyncio.to_thread(self._http, method, path, headers, query, body)
        content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        kind = b"application/octet-stream" if isinstance(payload, bytes) else b"application/json"
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]})
        await send({"type": "http.response.body", "body": content})

    # -- the Jobs API ------------------------------------------------------------------------------

    def _http(self, method: str, path: str, headers: dict[str, str], query: dict[str, str], body: bytes) -> Any:
        parts = path.strip("/").split("/")
        if path == "/api/whoami-v2":
            return 200, {"name": self.namespace, "id": "fake-user-id", "type": "user"}
        if method == "POST" and parts[:2] == ["api", "jobs"] and len(parts) == 3:
            return self._run_job(json.loads(body))
        if parts[:2] == ["api", "jobs"] and len(parts) >= 4:
            job = self.jobs.get(parts[3])
            if job is None:
                return 404, {"error": f"job {parts[3]} not found"}
            if method == "GET" and len(parts) == 4:
                return 200, self._info(job)
            if method == "POST" and parts[4:] == ["cancel"]:
                return self._cancel(job)
        if parts[0] == "jobs" and len(parts) >= 3:
            return self._server(method, parts, headers, query, body)
        return 404, {"error": f"fake Hub: no route {method} {path}"}

    def _run_job(self, spec: dict[str, Any]) -> tuple[int, Any]:
        if self.fail_creates:
            return self.fail_creates.pop(0), {"error": "injected failure"}
        job_id = secrets.token_hex(12)
        job_secrets = dict(spec.get("secrets") or {})
        envs = {**dict(spec.get("environment") or {}), **job_secrets}
        machine = self.machines.start(spec["dockerImage"], envs)
        job = FakeJob(job_id, spec, machine, token=job_secrets.get("SBX_TOKEN", ""))
        with self._lock:
            self.jobs[job_id] = job
            self.created += 1
        return 200, self._info(job)

    def _info(self, job: FakeJob) -> dict[str, Any]:
        spec = {k: v for k, v in job.spec.items() if k != "secrets"}
        return {
            **spec,
            "id": job.job_id,
            "owner": {"id": "fake-user-id", "name": self.namespace, "type": "user"},
            "status": {"stage": job.stage, "exposeUrls": [f"{self.url}/jobs/{job.job_id}--{SERVER_PORT}.fake"]},
        }

    def _cancel(self, job: FakeJob) -> tuple[int, Any]:
        if self.fail_cancels:
            self.fail_cancels -= 1
            return 500, {"error": "injected cancel failure"}
        if job.stage == "RUNNING" and job.machine is not None:
            self.machines.remove(job.machine)
            with self._lock:
                job.stage = "CANCELED"
                self.killed += 1
        return 200, {}

    # -- the sandbox server ------------------------------------------------------------------------

    def _job_for(self, parts: list[str], headers: dict[str, str]) -> FakeJob | tuple[int, Any]:
        job = self.jobs.get(parts[1].split("--", 1)[0])
        if job is None or job.stage != "RUNNING" or job.machine is None:
            return 502, {"error": "sandbox job is not running"}
        if headers.get("x-sandbox-token") != job.token:
            return 403, {"error": "wrong sandbox token"}
        return job

    def _server(self, method: str, parts: list[str], headers: dict[str, str], query: dict[str, str], body: bytes):
        job = self._job_for(parts, headers)
        if not isinstance(job, FakeJob):
            return job
        assert job.machine is not None
        route = "/".join(parts[2:])
        if route == "health":
            return (503, {"error": "starting"}) if self.fail_health else (200, {"protocol": PROTOCOL})
        if route == "v1/processes" and method == "POST":
            return self._start_background(job, json.loads(body))
        if route == "v1/processes" and method == "GET":
            listed = [p for p in job.processes.values() if p.running or not self.vanish_processes]
            return 200, [
                {"id": p.id, "pid": p.pid, "cmd": p.cmd, "running": p.running, "exit_code": p.exit_code} for p in listed
            ]
        if parts[2:4] == ["v1", "processes"] and method == "DELETE":
            process = job.processes.get(parts[4])
            if process is None:
                return 404, {"error": "no such process"}
            was_running = process.running
            if was_running:
                self.machines.kill_group(job.machine, process.pid)
            return 200, {"killed": was_running}
        path = query.get("path", "")
        if route == "v1/files/stat":
            found = self.machines.stat(job.machine, path)
            if found is None:
                return 404, {"error": f"{path}: no such file"}
            return 200, {"name": path.rsplit("/", 1)[-1], "path": path, "type": found[0], "size": found[1]}
        if route == "v1/files/read":
            try:
                data = self.machines.read(job.machine, path)
            except FileNotFoundError:
                return 404, {"error": f"{path}: no such file"}
            offset = int(query.get("offset", 0))
            length = int(query.get("length", len(data)))
            return 200, data[offset : offset + length]
        if route == "v1/files/write":
            self.machines.write(job.machine, path, body, user="root", mode=int(query.get("mode", "644"), 8))
            return 200, {}
        return 404, {"error": f"fake sandbox server: no route {method} /{route}"}

    def _argv(self, payload: dict[str, Any]) -> list[str]:
        cmd = payload["cmd"]
        return ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)

    def _start_background(self, job: FakeJob, payload: dict[str, Any]) -> tuple[int, Any]:
        assert job.machine is not None
        run = self.machines.start_run(
            job.machine, self._argv(payload), user="root", envs=payload.get("env") or {}, cwd=payload.get("cwd")
        )
        process = Background(secrets.token_hex(6), run.pid, payload["cmd"])
        job.processes[process.id] = process

        def follow() -> None:
            for _ in run.chunks:  # a background process's output is not returned
                pass
            code = self.machines.exit_code(run.exec_id)
            process.exit_code = None if code == 137 else code  # killed by a signal: no exit code
            process.running = False

        threading.Thread(target=follow, daemon=True).start()
        return 200, {"id": process.id, "pid": process.pid, "tag": None}

    async def _exec(self, path: str, headers: dict[str, str], payload: dict[str, Any], send: Any) -> None:
        parts = path.strip("/").split("/")
        job = await asyncio.to_thread(self._job_for, parts, headers)
        if not isinstance(job, FakeJob):
            status, error = job
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": json.dumps(error).encode()})
            return
        self.execs.append(payload)
        if self.fail_execs_after is not None and len(self.execs) > self.fail_execs_after:
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": b'{"error": "injected: the server stopped answering"}'})
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/x-ndjson")]}
        )
        events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._run_exec, args=(job, payload, loop, events), daemon=True).start()
        while (event := await events.get()) is not None:
            await send({"type": "http.response.body", "body": json.dumps(event).encode() + b"\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def _run_exec(self, job: FakeJob, payload: dict[str, Any], loop: Any, events: asyncio.Queue) -> None:
        def emit(event: dict[str, Any] | None) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        assert job.machine is not None
        started = time.monotonic()
        try:
            run = self.machines.start_run(
                job.machine, self._argv(payload), user="root", envs=payload.get("env") or {}, cwd=payload.get("cwd")
            )
        except RuntimeError as exc:
            emit({"event": "stderr", "data": str(exc)})
            emit({"event": "exit", "exit_code": 127, "timed_out": False})
            emit(None)
            return
        timed_out = threading.Event()
        timeout = payload.get("timeout")
        timer = None
        if timeout is not None:

            def expire() -> None:
                timed_out.set()
                self.machines.kill_group(job.machine, run.pid)

            timer = threading.Timer(float(timeout), expire)
            timer.start()
        for out, err in run.chunks:
            if out:
                emit({"event": "stdout", "data": out.decode(errors="replace")})
            if err:
                emit({"event": "stderr", "data": err.decode(errors="replace")})
        if timer is not None:
            timer.cancel()
        code = self.machines.exit_code(run.exec_id)
        duration = int((time.monotonic() - started) * 1000)
        if timed_out.is_set():
            emit({"event": "exit", "exit_code": None, "timed_out": True, "signal": 9, "duration_ms": duration})
        else:
            emit({"event": "exit", "exit_code": code, "timed_out": False, "duration_ms": duration})
        emit(None)
