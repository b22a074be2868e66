"""Fixtures of the egress tests: fake upstream registries on loopback (counting what they serve), an egress
service over a throwaway cache, and the sandbox's real relay (runner/docker/forwarder.py) in front of a proxy."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import agentbake
from agentbake.egress import EgressConfig, EgressService, Policy, ProxyHandle

# The sandbox's relay, run by path as the Docker backend runs it (standard library only).
FORWARDER = Path(agentbake.__file__).parent / "runner" / "docker" / "forwarder.py"

Route = Callable[["Handler"], tuple[int, dict[str, str], bytes]]


@dataclass
class FakeUpstream:
    """A loopback HTTP(S) server: `routes` maps a path to (status, headers, body) or to a function of the
    request; `hits` counts requests per path and `seen` keeps every request's headers."""

    url: str = ""
    routes: dict[str, tuple[int, dict[str, str], bytes] | Route] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    delay_s: float = 0.0

    def put(self, path: str, body: bytes, status: int = 200, **headers: str) -> None:
        self.routes[path] = (status, {"Content-Type": "application/octet-stream", **headers}, body)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: FakeUpstream

    def log_message(self, *args: object) -> None:
        pass

    def _serve(self, body_wanted: bool) -> None:
        fake = self.server.upstream  # type: ignore[attr-defined]
        fake.hits[self.path] += 1
        fake.seen.append((self.command, self.path, dict(self.headers.items())))
        if fake.delay_s:
            time.sleep(fake.delay_s)
        route = fake.routes.get(self.path)
        if route is None:
            status, headers, body = 404, {"Content-Type": "text/plain"}, b"not here\n"
        elif callable(route):
            status, headers, body = route(self)
        else:
            status, headers, body = route
        self.send_response(status)
        close_delimited = headers.get("X-Close-Delimited") == "1"  # no length: the body ends with the connection
        for key, value in headers.items():
            self.send_header(key, value)
        if close_delimited:
            self.send_header("Connection", "close")
            self.close_connection = True
        elif "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body_wanted:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._serve(True)

    def do_HEAD(self) -> None:
        self._serve(False)


@contextlib.contextmanager
def serve_fake(tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> Iterator[FakeUpstream]:
    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    fake = FakeUpstream()
    server.upstream = fake  # type: ignore[attr-defined]
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    fake.url = f"{'https' if tls else 'http'}://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with serve_fake() as fake:
        yield fake


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the CA bundle the proxy is given, like SSL_CERT_FILE)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_upstream(tls_cert: tuple[Path, Path]) -> Iterator[FakeUpstream]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, tls_cert))
    with serve_fake(context) as fake:
        yield fake


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[Callable[..., EgressService]]:
    """Services over a cache in tmp_path (a fresh one per test); every one made is closed at the end."""
    made: list[EgressService] = []

    def make(**settings: object) -> EgressService:
        settings.setdefault("cache_dir", tmp_path / "cache")
        settings.setdefault("ca_file", None)
        service = EgressService(EgressConfig.model_validate(settings))
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


@contextlib.contextmanager
def refusing_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A loopback port bound but not listening, held: a connect to it is refused."""
    with socket.socket() as held:
        held.bind((host, 0))
        yield held.getsockname()[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Sandboxed:
    """A proxy as a sandbox sees it: its relay's port on loopback, and the proxy's handle."""

    proxy: ProxyHandle
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def start_relay(tmp_path: Path) -> Iterator[Callable[[ProxyHandle], Sandboxed]]:
    """Run the sandbox's own relay (TCP on loopback -> the proxy's unix socket) as the sandbox would."""
    running: list[subprocess.Popen[bytes]] = []

    def start(proxy: ProxyHandle) -> Sandboxed:
        port = free_port()
        relay = subprocess.Popen([sys.executable, "-I", "-S", str(FORWARDER), str(port), str(proxy.socket_path)])
        running.append(relay)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return Sandboxed(proxy, port)
            time.sleep(0.02)
        raise AssertionError("the relay did not listen")

    yield start
    for relay in running:
        relay.kill()
        relay.wait()


@pytest.fixture
def sandbox(
    make_service: Callable[..., EgressService], start_relay: Callable[[ProxyHandle], Sandboxed], tmp_path: Path
) -> Callable[..., Sandboxed]:
    """`sandbox(policy, **settings)`: a service, a proxy for one sandbox's folder, and its relay."""

    def make(policy: Policy, **settings: object) -> Sandboxed:
        service = make_service(**settings)
        folder = tmp_path / f"sandbox-{len(list(tmp_path.glob('sandbox-*')))}"
        folder.mkdir(mode=0o700)
        return start_relay(service.start_proxy(folder, policy, log_path=folder / "refusals.jsonl"))

    return make


def loopback_policy(phase: str = "verifier", *extra: str) -> Policy:
    """An allowlist holding the fake upstreams' address (loopback must be listed by address to be reached)."""
    return Policy.build("allowlist", phase, ["127.0.0.1", *extra])
