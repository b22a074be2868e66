"""Fixtures: a scripted vLLM-like upstream and gateways in front of it, both real loopback servers."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from agentbake.gateway import GatewayConfig, TraceRecord, create_app, read_trace
from agentbake.scripted import Reply, ScriptedModel
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


@pytest.fixture
def tls_upstream(tls_files: TLSFiles) -> Iterator[tuple[ScriptedModel, str]]:
    """A scripted model served over https with the test CA's certificate, and its base URL."""
    model = ScriptedModel()
    with serve_in_thread(model, log_level="critical", tls=(tls_files.cert, tls_files.key)) as served:
        yield model, served.url + "/v1"


ROOT = Path(__file__).resolve().parents[2]
# The version the claude-code image bakes: the gateway is tested against what rollouts run.
CLAUDE_CODE_VERSION = orjson.loads((ROOT / "images" / "claude-code" / "lock.json").read_bytes())["agent"]["version"]
PREFIX = ROOT / ".cache" / "npm" / "claude-code"


def _version(binary: Path) -> str:
    try:
        result = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return ""
    return result.stdout.strip()


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    """Claude Code from npm in a cache prefix, installed once and reused on later runs."""
    package = PREFIX / "node_modules" / "@anthropic-ai"
    wrapper = package / "claude-code" / "bin" / "claude.exe"
    # The platform package holds the same binary; used directly if npm skipped the postinstall link.
    native = package / "claude-code-linux-x64" / "claude"
    for binary in (wrapper, native):
        if binary.exists() and _version(binary).startswith(CLAUDE_CODE_VERSION):
            return binary
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI"):
            pytest.fail("npm is needed to install Claude Code")
        pytest.skip("npm is not installed")
    PREFIX.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(PREFIX),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}",
        ],
        check=True,
        timeout=900,
    )
    for binary in (wrapper, native):
        if binary.exists() and _version(binary).startswith(CLAUDE_CODE_VERSION):
            return binary
    pytest.fail(f"Claude Code {CLAUDE_CODE_VERSION} did not install a working binary under {PREFIX}")


def claude_code_env(gw_url: str, home: Path) -> dict[str, str]:
    """A fully offline headless run (agentbake/gateway/README.md lists the variables), fresh HOME."""
    home.mkdir()
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gw_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
        "CLAUDE_CODE_MAX_RETRIES": "3",
    }


def tool_calls_so_far(request: dict) -> int:
    """How many tool-calling assistant turns the (OpenAI-dialect) request already holds: the agent's step."""
    return sum(1 for m in request["messages"] if m["role"] == "assistant" and m.get("tool_calls"))


CLAUDE_CODE_ARGS = ["-p", "--output-format", "json", "--dangerously-skip-permissions", "--model", "claude-sonnet-4-5"]


def run_claude_code(
    claude_bin: Path, prompt: str, *, gw_url: str, cwd: Path, home: Path
) -> subprocess.CompletedProcess:
    """Claude Code headless on `prompt` in `cwd` through the gateway at `gw_url`; fails the test unless it exits 0."""
    result = subprocess.run(
        [claude_bin, *CLAUDE_CODE_ARGS],
        input=prompt,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=claude_code_env(gw_url, home),
        timeout=240,
    )
    assert result.returncode == 0, f"stdout={result.stdout[-2000:]}\nstderr={result.stderr[-2000:]}"
    return result


# ---------------------------------------------------------------- preflight

CALLS_PING = Reply(text="", tool_calls=[("ping", {})])


@pytest.fixture
def serve_model() -> Iterator[Callable[..., tuple[ScriptedModel, str]]]:
    """Serve a fresh scripted model (calling `ping` unless told otherwise); returns it and its /v1 URL."""
    servers = []

    def start(*, ignore: set[str] = frozenset(), reply: Reply = CALLS_PING, **served: Any) -> tuple[ScriptedModel, str]:
        model = ScriptedModel()
        model.responder = lambda request: reply
        model.ignore_fields = set(ignore)
        server = serve_in_thread(model, log_level="critical", **served)
        servers.append(server)
        return model, server.url + "/v1"

    yield start
    for server in servers:
        server.stop()


def statuses(report) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


def details(report) -> dict[str, str]:
    return {check.name: check.detail for check in report.checks}


# ---------------------------------------------------------------- token-in


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tokenizer with a Qwen-style chat template, built here (tests/tiny_tokenizer.py)."""
    from tests.tiny_tokenizer import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture
def drifting_model(tokenizer_dir: Path) -> Iterator[tuple[ScriptedModel, str]]:
    """A scripted model in `tokenizer_dir`'s ids that samples each part of an answer on its own (a non-canonical
    tokenization, as real models sample): re-rendering the history and tokenizing it whole then drifts from what
    was sampled wherever a merge spans two parts. Returns it and its base URL."""
    model = ScriptedModel(tokenizer=tokenizer_dir, piecewise=True)
    with serve_in_thread(model, log_level="critical") as server:
        yield model, server.url
