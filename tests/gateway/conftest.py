"""Fixtures: a scripted vLLM-like upstream and gateways in front of it, both real loopback servers."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from agentbake.gateway import GatewayConfig, TraceRecord, create_app, read_trace
from agentbake.scripted import ScriptedModel
from agentbake.serve import ServedApp, serve_in_thread


@pytest.fixture(scope="session")
def _upstream_server() -> Iterator[tuple[ScriptedModel, ServedApp]]:
    fake = ScriptedModel()
    with serve_in_thread(fake, log_level="critical") as server:
        yield fake, server


@dataclass
class Upstream:
    fake: ScriptedModel
    url: str


@pytest.fixture
def upstream(_upstream_server: tuple[ScriptedModel, ServedApp]) -> Upstream:
    """The shared fake upstream, with its script and logs reset for this test."""
    fake, server = _upstream_server
    fresh = ScriptedModel()
    fake.__dict__.update({k: v for k, v in fresh.__dict__.items() if k != "_ids"})
    return Upstream(fake=fake, url=server.url)


@dataclass
class RunningGateway:
    url: str
    trace: Path
    config: GatewayConfig

    def http_client(self) -> httpx2.Client:
        """A client for the SDKs' `http_client` (they are built on httpx2, httpx's successor, and refuse an
        httpx.Client), dialling the gateway's unix socket when it has one."""
        return httpx2.Client(transport=httpx2.HTTPTransport(uds=str(self.config.uds) if self.config.uds else None))

    def records(self) -> list[TraceRecord]:
        return read_trace(self.trace) if self.trace.exists() else []


@pytest.fixture
def make_gateway(upstream: Upstream, tmp_path: Path) -> Iterator[Callable[..., RunningGateway]]:
    """Start a gateway in front of the fake upstream; keyword arguments override GatewayConfig fields."""
    servers: list[ServedApp] = []

    def start(**overrides: object) -> RunningGateway:
        trace = tmp_path / f"trace{len(servers)}.jsonl"
        settings = {"upstream": upstream.url + "/v1", "trace": trace, "read_timeout_s": 2.0, **overrides}
        config = GatewayConfig(**settings)
        server = serve_in_thread(create_app(config), uds=config.uds, log_level="critical")
        servers.append(server)
        return RunningGateway(url=server.url, trace=trace, config=config)

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def gateway(make_gateway: Callable[..., RunningGateway]) -> RunningGateway:
    """A gateway with default settings (short read timeout so timeout faults end fast)."""
    return make_gateway()


@dataclass
class TLSFiles:
    ca: Path
    """PEM of the test's own certificate authority (what a client must trust)."""
    cert: Path
    """The server's certificate for 127.0.0.1, signed by `ca`."""
    key: Path


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """A throwaway CA and a server certificate for 127.0.0.1 it signed, made with openssl for this run."""
    folder = tmp_path_factory.mktemp("tls")
    ca, ca_key, cert, key, csr = (folder / name for name in ("ca.pem", "ca.key", "srv.pem", "srv.key", "srv.csr"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = functools.partial(subprocess.run, check=True, capture_output=True)
    ca_extensions = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"]
    run(
        [
            "openssl",
            "req",
            "-x509",
            *ec,
            "-keyout",
            ca_key,
            "-out",
            ca,
            "-days",
            "2",
            "-subj",
            "/CN=test CA",
            *ca_extensions,
        ]
    )
    run(["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"])
    extensions = folder / "srv.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    signing = ["-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2", "-extfile", extensions]
    run(["openssl", "x509", "-req", "-in", csr, "-out", cert, *signing])
    return TLSFiles(ca=ca, cert=cert, key=key)
