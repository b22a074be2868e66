"""A loopback stand-in for the Hugging Face Hub API: what `create_repo` + `upload_folder` call.

Records the repos created and the files each commit carried; can answer a chosen call with an
error status. The real `huggingface_hub` SDK talks to it through HF_ENDPOINT.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeHub:
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)  # repo id -> create body
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo id -> path -> content
    commits: list[str] = field(default_factory=list)
    tokens: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, Authorization
    fail: dict[str, int] = field(default_factory=dict)  # "METHOD path-prefix" -> status
    url: str = ""


def _handler(state: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status >= 400:
                self.send_header("X-Error-Message", payload.get("error", ""))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.tokens.append((self.command, self.path.split("?")[0], self.headers.get("Authorization", "")))
            path = self.path.split("?")[0]
            for key, status in state.fail.items():
                method, prefix = key.split(" ", 1)
                if method == self.command and path.startswith(prefix):
                    return self._send(status, {"error": f"scripted {status}"})
            if self.command == "POST" and path == "/api/repos/create":
                body = json.loads(raw)
                repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
                if repo_id in state.repos:
                    return self._send(409, {"error": "You already created this space repo", "url": repo_id})
                state.repos[repo_id] = body
                return self._send(200, {"url": f"{state.url}/spaces/{repo_id}"})
            if self.command == "POST" and path == "/api/validate-yaml":
                body = json.loads(raw)
                if body["repoType"] == "space" and "sdk:" not in body["content"]:
                    return self._send(400, {"error": "invalid metadata", "errors": [{"message": "no sdk"}]})
                return self._send(200, {"errors": [], "warnings": []})
            parts = path.strip("/").split("/")
            if self.command == "POST" and parts[:2] == ["api", "spaces"] and parts[4:5] == ["preupload"]:
                files = json.loads(raw)["files"]
                return self._send(
                    200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
                )
            if self.command == "POST" and parts[:2] == ["api", "spaces"] and parts[4:5] == ["commit"]:
                repo_id = f"{parts[2]}/{parts[3]}"
                if repo_id not in state.repos:
                    return self._send(404, {"error": "Repository not found"})
                for line in raw.decode().splitlines():
                    item = json.loads(line)
                    if item["key"] == "header":
                        state.commits.append(item["value"]["summary"])
                    elif item["key"] == "file":
                        content = base64.b64decode(item["value"]["content"])
                        state.files.setdefault(repo_id, {})[item["value"]["path"]] = content
                return self._send(
                    200, {"commitUrl": f"{state.url}/spaces/{repo_id}/commit/1", "commitOid": "1" * 40, "success": True}
                )
            return self._send(404, {"error": f"fake Hub: no route {self.command} {path}"})

        do_GET = do_POST = do_PUT = _handle

    return Handler


class FakeHubServer:
    """`with FakeHubServer() as hub:` serves on 127.0.0.1; point HF_ENDPOINT at hub.url."""

    def __enter__(self) -> FakeHub:
        self.state = FakeHub()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.state.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.state

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
