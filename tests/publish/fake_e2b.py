"""A loopback stand-in for E2B's control plane: the template-build calls the real `e2b` SDK makes.

It records every request (path, headers, JSON body) and can answer a chosen call with an error
status, or end a build in `error`, so tests see what the SDK sent and how failures are handled.
As E2B does, a template's name (alias) exists from the moment its first build is requested, while its
tags name a build only once that build is ready; `hold` keeps builds `building` until it is set.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeE2B:
    """State of the fake: templates by name (tag -> build id), requests seen, scripted failures."""

    templates: dict[str, dict[str, str]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)  # "METHOD path-prefix" -> status to answer
    build_ends_in_error: str | None = None
    uploads: list[bytes] = field(default_factory=list)
    url: str = ""
    hold: threading.Event | None = None
    """While set to an unset Event, builds stay `building` (the tests' window in which a name exists unready)."""
    failing: set[str] = field(default_factory=set)
    """Build ids that end in `error` (another publisher's build failing)."""
    builds: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Build id -> {name, tags, status}: every build requested."""

    def bodies(self, method: str, prefix: str) -> list[Any]:
        return [r.body for r in self.requests if r.method == method and r.path.startswith(prefix)]


def _handler(state: FakeE2B) -> type[BaseHTTPRequestHandler]:
    builds = state.builds
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # the SDK's client keeps connections: a server closing them races it

        def log_message(self, *args: Any) -> None:
            pass

        def _body(self) -> Any:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "PUT":
                state.uploads.append(data)
                return None
            return json.loads(data) if data else None

        def _send(self, status: int, payload: Any = None) -> None:
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            body = self._body()
            path = self.path
            state.requests.append(Recorded(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body))
            for key, status in state.fail.items():
                method, prefix = key.split(" ", 1)
                if method == self.command and path.startswith(prefix):
                    return self._send(status, {"code": status, "message": f"scripted {status}"})
            parts = path.split("?")[0].strip("/").split("/")
            if self.command == "GET" and parts[:2] == ["templates", "aliases"]:
                name = parts[2]
                if name in state.templates or any(b["name"] == name for b in builds.values()):
                    return self._send(200, {"templateID": name, "public": False})
                return self._send(404, {"code": 404, "message": "not found"})
            if self.command == "GET" and len(parts) == 2 and parts[0] == "templates":
                return self._send(200, _template_with_builds(parts[1], state))
            if self.command == "GET" and len(parts) == 3 and parts[0] == "templates" and parts[2] == "tags":
                tags = state.templates.get(parts[1], {})
                return self._send(
                    200,
                    [{"tag": t, "buildID": b, "createdAt": "2026-01-01T00:00:00Z"} for t, b in sorted(tags.items())],
                )
            if self.command == "POST" and path == "/templates/tags":
                name, _, source = body["target"].partition(":")
                build_id = state.templates[name][source]
                for tag in body["tags"]:
                    state.templates[name][tag] = build_id
                return self._send(201, {"tags": body["tags"], "buildID": build_id})
            if self.command == "POST" and path == "/v3/templates":
                build_id = str(uuid.uuid4())
                with lock:
                    builds[build_id] = {"name": body["name"], "tags": body.get("tags") or ["default"], "polls": 0}
                    builds[build_id]["status"] = "waiting"
                return self._send(
                    202,
                    {
                        "templateID": body["name"],
                        "buildID": build_id,
                        "public": False,
                        "names": [body["name"]],
                        "tags": body.get("tags") or [],
                        "aliases": [],
                    },
                )
            if self.command == "GET" and len(parts) == 4 and parts[2] == "files":
                return self._send(201, {"present": False, "url": f"{state.url}/upload/{parts[3]}"})
            if self.command == "PUT" and parts[0] == "upload":
                return self._send(200)
            if self.command == "POST" and parts[:2] == ["v2", "templates"]:
                builds[parts[4]]["status"] = "building"
                return self._send(202)
            if self.command == "GET" and len(parts) == 5 and parts[4] == "status":
                build_id = parts[3]
                build = builds[build_id]
                build["polls"] += 1
                if build["status"] == "ready":
                    return self._send(
                        200,
                        {"templateID": parts[1], "buildID": build_id, "status": "ready", "logs": [], "logEntries": []},
                    )
                if build["polls"] == 1 or build["status"] == "waiting" or (state.hold and not state.hold.is_set()):
                    entries = [{"timestamp": "2026-01-01T00:00:00Z", "level": "info", "message": "pulling image"}]
                    return self._send(
                        200,
                        {
                            "templateID": parts[1],
                            "buildID": build_id,
                            "status": "building",
                            "logs": [],
                            "logEntries": entries,
                        },
                    )
                if state.build_ends_in_error or build_id in state.failing:
                    build["status"] = "error"
                    return self._send(
                        200,
                        {
                            "templateID": parts[1],
                            "buildID": build_id,
                            "status": "error",
                            "logs": [],
                            "logEntries": [],
                            "reason": {"message": state.build_ends_in_error or "failed"},
                        },
                    )
                for tag in build["tags"]:
                    state.templates.setdefault(build["name"], {})[tag] = build_id
                build["status"] = "ready"
                return self._send(
                    200, {"templateID": parts[1], "buildID": build_id, "status": "ready", "logs": [], "logEntries": []}
                )
            return self._send(404, {"code": 404, "message": f"fake E2B: no route {self.command} {path}"})

        do_GET = do_POST = do_PUT = _handle

    return Handler


def _template_with_builds(name: str, state: FakeE2B) -> dict[str, Any]:
    """GET /templates/{id}: the template and its builds (a tag seeded by a test names a ready build)."""
    when = "2026-01-01T00:00:00Z"
    listed = {build_id: build["status"] for build_id, build in state.builds.items() if build["name"] == name}
    for build_id in state.templates.get(name, {}).values():
        listed.setdefault(build_id, "ready")
    build_list = [
        {"buildID": b, "status": s, "createdAt": when, "updatedAt": when, "cpuCount": 2, "memoryMB": 2048}
        for b, s in listed.items()
    ]
    return {
        "templateID": name,
        "buildID": next(iter(listed), "00000000-0000-0000-0000-000000000000"),
        "cpuCount": 2,
        "memoryMB": 2048,
        "diskSizeMB": 1024,
        "public": False,
        "aliases": [name],
        "names": [name],
        "createdAt": when,
        "updatedAt": when,
        "createdBy": None,
        "lastSpawnedAt": None,
        "spawnCount": 0,
        "buildCount": len(build_list),
        "envdVersion": "0.5.7",
        "buildStatus": "ready" if "ready" in listed.values() else "building",
        "builds": build_list,
    }


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # publishers polling at once must not overflow the listen backlog
    daemon_threads = True


class FakeE2BServer:
    """`with FakeE2BServer() as fake:` serves on 127.0.0.1; point E2B_API_URL at fake.url."""

    def __enter__(self) -> FakeE2B:
        self.state = FakeE2B()
        self.server = _Server(("127.0.0.1", 0), _handler(self.state))
        self.state.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self.state

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
