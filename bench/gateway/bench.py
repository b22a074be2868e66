"""Side-by-side latency, time to first token, throughput and memory of the gateway and two peers.

    .venv/bin/python bench/gateway/bench.py [--quick] [--skip-peers]

Every server runs on loopback in its own process against one scripted vLLM-like upstream (the one the
tests use). Rows: the upstream called directly, the gateway (OpenAI dialect; Anthropic, Responses and Google
dialects unary and streaming), LiteLLM's proxy and claude-code-router doing the same translation. Peers are installed
on first use into .cache/bench/ (a venv for LiteLLM, an npm prefix for claude-code-router); a peer
that cannot be installed or started is printed as unavailable with the reason. All loops are bounded.

Load comes from a minimal HTTP/1.1 keep-alive client on uvloop, so the client's own cost stays small
and identical for every row. "added" = row percentile minus the baseline's: the gateway's baseline is
the upstream called with the same capture fields the gateway injects (logprobs, token ids), so only
the gateway's own work is counted; the peers inject nothing, so theirs is the plain direct call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "bench"
LITELLM_VENV = CACHE / "litellm-venv"
CCR_PREFIX = CACHE / "ccr"
MODEL = "fake-model"
FIRST_TOKEN = b"Hello"  # the fake upstream's first content token
THROUGHPUT_SECONDS = 20.0
SUSTAINED_RATE = 500  # the target (README): requests per second through one gateway process


# ------------------------------------------------------------------ a small keep-alive HTTP client


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def request(self, raw: bytes) -> tuple[int, float, float]:
        """(status, seconds to the first token's bytes, seconds to the end of the answer)."""
        start = time.perf_counter()
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        headers = head.lower()
        first = None
        if b"transfer-encoding: chunked" in headers:
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                data = await self.reader.readexactly(size + 2)
                if first is None and FIRST_TOKEN in data:
                    first = time.perf_counter() - start
                if size == 0:
                    break
        else:
            length = int(headers.split(b"content-length:")[1].split(b"\r\n")[0])
            await self.reader.readexactly(length)
        end = time.perf_counter() - start
        return status, (first if first is not None else end), end

    def close(self) -> None:
        self.writer.close()


def http_post(port: int, path: str, body: dict, headers: dict[str, str]) -> bytes:
    payload = json.dumps(body).encode()
    lines = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", "content-type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"content-length: {len(payload)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


@dataclass
class Result:
    name: str
    latencies: list[float] = field(default_factory=list)
    first_tokens: list[float] = field(default_factory=list)
    rps: float = 0.0
    rss_mb: float | None = None
    errors: int = 0
    unavailable: str | None = None
    baseline: str = ""
    streaming: bool = False


def timed(work: Callable[[], object], runs: int) -> tuple[float, float]:
    """p50 and p95 milliseconds of `runs` calls of `work`, after one unmeasured call (connections, imports)."""
    work()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def measure(port: int, raw: bytes, sequential: int, concurrent: int, result: Result) -> None:
    conn = await Connection.open(port)
    for _ in range(max(20, sequential // 10)):  # warm-up: pools, JIT in node, imports in peers
        status, _, _ = await conn.request(raw)
        if status != 200:
            conn.close()
            result.unavailable = f"answers {status} to this request"
            return
    for _ in range(sequential):
        status, first, end = await conn.request(raw)
        result.errors += status != 200
        result.latencies.append(end)
        result.first_tokens.append(first)
    conn.close()

    workers = 16
    per_worker = concurrent // workers
    deadline = time.perf_counter() + THROUGHPUT_SECONDS
    done = 0

    async def worker() -> None:
        nonlocal done
        c = await Connection.open(port)
        for _ in range(per_worker):
            if time.perf_counter() > deadline:  # slow peers: bounded in time as well as in count
                break
            status, _, _ = await c.request(raw)
            result.errors += status != 200
            done += 1
        c.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    result.rps = done / (time.perf_counter() - start)


async def sustained(port: int, raw: bytes, rate: int, seconds: float) -> tuple[float, list[float], int]:
    """Open-loop load: request i is due at start + i/rate and its latency counts from then, so a proxy
    that falls behind shows it in the percentiles. Returns (achieved req/s, latencies, errors)."""
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(32):
        pool.put_nowait(await Connection.open(port))
    latencies: list[float] = []
    errors = 0

    async def one(due: float) -> None:
        nonlocal errors
        conn = await pool.get()
        status, _, _ = await conn.request(raw)
        pool.put_nowait(conn)
        errors += status != 200
        latencies.append(time.perf_counter() - due)

    total = int(rate * seconds)
    start = time.perf_counter()
    tasks = []
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    achieved = total / (time.perf_counter() - start)
    while not pool.empty():
        pool.get_nowait().close()
    return achieved, latencies, errors


# ------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants (LiteLLM and node may fork helpers)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            with open(f"/proc/{current}/task/{current}/children") as children:
                pending += [int(c) for c in children.read().split()]
        except OSError:
            continue
    return total / 1024


class Server:
    def __init__(self, name: str, args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
        self.name = name
        fd, log = tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log")
        self.log = Path(log)
        self.process = subprocess.Popen(
            args, env=env, cwd=cwd, stdout=fd, stderr=subprocess.STDOUT, start_new_session=True
        )
        os.close(fd)  # the child holds its own copy

    def wait_ready(self, port: int, raw: bytes, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.tail()}")
            try:
                status, _, _ = asyncio.run(self._probe(port, raw))
                if status == 200:
                    return
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s: {self.tail()}")

    @staticmethod
    async def _probe(port: int, raw: bytes) -> tuple[int, float, float]:
        conn = await Connection.open(port)
        try:
            return await asyncio.wait_for(conn.request(raw), 10)
        finally:
            conn.close()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-600:].strip().replace("\n", " | ")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # the group this script started, nothing else
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def gateway_server(upstream_url: str, port: int, trace: Path, *options: str) -> Server:
    """`agentbake gateway` (this venv's) as a process on `port` in front of `upstream_url`, tracing to `trace`."""
    agentbake = str(Path(sys.executable).with_name("agentbake"))
    args = [agentbake, "gateway", "--upstream", upstream_url, "--port", str(port), "--trace", str(trace), *options]
    return Server("gateway", args)


def serve_upstream(port: int) -> None:
    """Entry point of the upstream process (`bench.py --serve-upstream PORT`)."""
    from agentbake.scripted import ScriptedModel
    from agentbake.serve import serve

    serve(ScriptedModel(keep_log=False), port=port)


def install_litellm() -> Path:
    binary = LITELLM_VENV / "bin" / "litellm"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run(
            [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
            check=True,
            capture_output=True,
            timeout=900,
        )
    return binary


def install_ccr() -> Path:
    cli = CCR_PREFIX / "node_modules" / "@musistudio" / "claude-code-router" / "dist" / "cli.js"
    if not cli.exists():
        subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(CCR_PREFIX),
                "--no-audit",
                "--no-fund",
                "@musistudio/claude-code-router",
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
    return cli


# ------------------------------------------------------------------ the run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (smoke run)")
    parser.add_argument("--skip-peers", action="store_true", help="only direct and gateway rows")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    import uvloop

    sequential, concurrent, seconds = (300, 800, 3.0) if args.quick else (2000, 4000, 10.0)
    steady: list[tuple[str, float, list[float], int]] = []
    steady_rss = 0.0
    work = Path(tempfile.mkdtemp(prefix="agentbake-bench-"))
    up_port = free_port()
    servers: list[Server] = []
    results: list[Result] = []
    anthropic_headers = {"x-api-key": "dummy", "anthropic-version": "2023-06-01"}
    oai_headers = {"authorization": "Bearer dummy"}
    user = [{"role": "user", "content": "Say hello."}]
    chat = {"model": MODEL, "messages": user, "max_tokens": 256}
    capture = {
        **chat,
        "logprobs": True,
        "top_logprobs": 1,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
    }
    msgs = {"model": "claude-bench", "messages": user, "max_tokens": 256}

    def run(name: str, port: int, raw: bytes, *, baseline: str, streaming: bool = False) -> Result:
        result = Result(name=name, baseline=baseline, streaming=streaming)
        try:
            uvloop.run(measure(port, raw, sequential, concurrent, result))
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            result.unavailable = f"failed under load: {exc!r}"[:200]
        results.append(result)
        return result

    try:
        upstream = Server("upstream", [sys.executable, __file__, "--serve-upstream", str(up_port)])
        servers.append(upstream)
        upstream.wait_ready(up_port, http_post(up_port, "/v1/chat/completions", chat, {}), 60)
        run("direct", up_port, http_post(up_port, "/v1/chat/completions", chat, {}), baseline="-")
        run(
            "direct (stream)",
            up_port,
            http_post(up_port, "/v1/chat/completions", {**chat, "stream": True}, {}),
            baseline="-",
            streaming=True,
        )
        run(
            "direct + capture fields",
            up_port,
            http_post(up_port, "/v1/chat/completions", capture, {}),
            baseline="-",
        )
        run(
            "direct + capture (stream)",
            up_port,
            http_post(
                up_port,
                "/v1/chat/completions",
                {**capture, "stream": True, "stream_options": {"include_usage": True}},
                {},
            ),
            baseline="-",
            streaming=True,
        )

        gw_port = free_port()
        gateway = gateway_server(f"http://127.0.0.1:{up_port}/v1", gw_port, work / "trace.jsonl")
        servers.append(gateway)
        gateway.wait_ready(gw_port, http_post(gw_port, "/v1/chat/completions", chat, oai_headers), 60)
        baselines = ("direct + capture fields", "direct + capture (stream)")
        run_proxy(run, gateway, gw_port, "gateway", chat, msgs, oai_headers, anthropic_headers, baselines)
        run_dialects(run, gateway, gw_port, baselines)
        for label, port, path, body, headers in (
            ("direct + capture fields", up_port, "/v1/chat/completions", capture, {}),
            ("gateway OpenAI", gw_port, "/v1/chat/completions", chat, oai_headers),
            ("gateway Anthropic", gw_port, "/v1/messages", msgs, anthropic_headers),
        ):
            outcome = uvloop.run(sustained(port, http_post(port, path, body, headers), SUSTAINED_RATE, seconds))
            steady.append((label, *outcome))
        steady_rss = tree_rss_mb(gateway.process.pid)
        if args.skip_peers:
            return
        start_litellm(run, servers, results, work, up_port, chat, msgs, anthropic_headers)
        start_ccr(run, servers, results, work, up_port, msgs, anthropic_headers)
    finally:
        for server in servers:
            server.stop()
        print_table(results, sequential, concurrent)
        if steady:
            print(f"\nSustained {SUSTAINED_RATE} req/s for {seconds:.0f} s per row (open loop, 32 connections)")
            print(f"gateway RSS afterwards: {steady_rss:.0f} MB\n")
            print("| row | achieved req/s | p50 ms | p99 ms | errors |\n|---|---|---|---|---|")
            for label, achieved, latencies, errors in steady:
                print(
                    f"| {label} | {achieved:.0f} | {pct(latencies, 0.5):.2f} | {pct(latencies, 0.99):.2f} | {errors} |"
                )


def run_proxy(run, server, port, label, chat, msgs, oai_headers, anthropic_headers, baselines) -> None:
    """The proxy's rows: OpenAI dialect (when `chat` is given), Anthropic unary, Anthropic streamed."""
    unary, stream = baselines
    rows = [
        (f"{label} OpenAI", "/v1/chat/completions", chat, oai_headers, unary, False),
        (f"{label} Anthropic", "/v1/messages", msgs, anthropic_headers, unary, False),
        (f"{label} Anthropic (stream)", "/v1/messages", {**msgs, "stream": True}, anthropic_headers, stream, True),
    ]
    results = [
        run(name, port, http_post(port, path, body, headers), baseline=baseline, streaming=streaming)
        for name, path, body, headers, baseline, streaming in rows
        if body is not None
    ]
    rss = tree_rss_mb(server.process.pid)
    for result in results:
        result.rss_mb = rss


def run_dialects(run, server, port, baselines) -> None:
    """The gateway's rows for the dialects no peer here speaks: OpenAI Responses (Codex) and Google (Gemini CLI)."""
    unary, stream = baselines
    responses = {"model": MODEL, "input": "Say hello.", "max_output_tokens": 256}
    google = {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}
    google_headers = {"x-goog-api-key": "dummy"}
    oai_headers = {"authorization": "Bearer dummy"}
    generate = f"/v1beta/models/{MODEL}:generateContent"
    rows = [
        ("gateway Responses", "/v1/responses", {**responses, "stream": False}, oai_headers, unary, False),
        ("gateway Responses (stream)", "/v1/responses", {**responses, "stream": True}, oai_headers, stream, True),
        ("gateway Google", generate, google, google_headers, unary, False),
        (
            "gateway Google (stream)",
            generate.replace(":generate", ":streamGenerate") + "?alt=sse",
            google,
            google_headers,
            stream,
            True,
        ),
    ]
    results = [
        run(name, port, http_post(port, path, body, headers), baseline=baseline, streaming=streaming)
        for name, path, body, headers, baseline, streaming in rows
    ]
    rss = tree_rss_mb(server.process.pid)
    for result in results:
        result.rss_mb = rss


def start_litellm(run, servers, results, work, up_port, chat, msgs, anthropic_headers) -> None:
    try:
        binary = install_litellm()
    except (subprocess.SubprocessError, OSError) as exc:
        results.append(Result(name="LiteLLM proxy", unavailable=f"install failed: {exc}"))
        return
    config = work / "litellm.yaml"
    upstream = {"api_base": f"http://127.0.0.1:{up_port}/v1", "api_key": "dummy"}
    models = [
        {"model_name": name, "litellm_params": {"model": f"openai/{MODEL}", **upstream}}
        for name in (MODEL, "claude-bench")
    ]
    config.write_text(
        json.dumps(
            {
                "model_list": models,
                "litellm_settings": {"drop_params": True, "telemetry": False, "num_retries": 0},
            }
        )
    )
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of the cost map at start
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "NO_DOCS": "True",
        "LITELLM_MASTER_KEY": "sk-bench",  # it refuses to serve unauthenticated
        # Its /v1/messages otherwise calls the upstream's Responses API, which vLLM-style servers lack.
        "LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES": "true",
    }
    server = Server(
        "litellm", [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)], env=env
    )
    servers.append(server)
    try:
        probe = http_post(port, "/v1/chat/completions", chat, {"authorization": "Bearer sk-bench"})
        server.wait_ready(port, probe, 180)
    except RuntimeError as exc:
        results.append(Result(name="LiteLLM proxy", unavailable=str(exc)[:200]))
        return
    key = {"authorization": "Bearer sk-bench", "x-api-key": "sk-bench"}
    baselines = ("direct", "direct (stream)")
    run_proxy(run, server, port, "LiteLLM", chat, msgs, key, {**anthropic_headers, **key}, baselines)
    server.stop()


def start_ccr(run, servers, results, work, up_port, msgs, anthropic_headers) -> None:
    try:
        cli = install_ccr()
    except (subprocess.SubprocessError, OSError) as exc:
        results.append(Result(name="claude-code-router", unavailable=f"install failed: {exc}"))
        return
    home = work / "ccr-home"
    (home / ".claude-code-router").mkdir(parents=True)
    port = free_port()
    config = {
        "HOST": "127.0.0.1",
        "PORT": port,
        "LOG": False,
        "Providers": [
            {
                "name": "local",
                "api_base_url": f"http://127.0.0.1:{up_port}/v1/chat/completions",
                "api_key": "dummy",
                "models": [MODEL],
            }
        ],
        "Router": {"default": f"local,{MODEL}"},
    }
    (home / ".claude-code-router" / "config.json").write_text(json.dumps(config))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CI": "true"}
    server = Server("ccr", ["node", str(cli), "start"], env=env, cwd=home)
    servers.append(server)
    try:
        server.wait_ready(port, http_post(port, "/v1/messages", msgs, anthropic_headers), 120)
    except RuntimeError as exc:
        results.append(Result(name="claude-code-router", unavailable=str(exc)[:200]))
        return
    run_proxy(run, server, port, "ccr", None, msgs, None, anthropic_headers, ("direct", "direct (stream)"))
    results.append(Result(name="ccr OpenAI", unavailable="claude-code-router serves the Anthropic dialect only"))
    server.stop()


def print_table(results: list[Result], sequential: int, concurrent: int) -> None:
    by_name = {r.name: r for r in results}
    print(f"\n{sequential} sequential requests per row (one keep-alive connection),")
    print(f"then {concurrent} over 16 connections for req/s")
    print(f"machine: {os.cpu_count()} cores; everything on loopback\n")
    header = (
        "row",
        "p50 ms",
        "p99 ms",
        "+p50 ms",
        "+p99 ms",
        "1st tok p50",
        "+1st tok",
        "req/s",
        "RSS MB",
        "errors",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in results:
        if r.unavailable:
            print(f"| {r.name} | unavailable: {r.unavailable.replace('|', '/')} |" + " |" * (len(header) - 2))
            continue
        base = by_name.get(r.baseline)
        p50, p99 = pct(r.latencies, 0.5), pct(r.latencies, 0.99)
        added50 = f"{p50 - pct(base.latencies, 0.5):+.2f}" if base else "-"
        added99 = f"{p99 - pct(base.latencies, 0.99):+.2f}" if base else "-"
        first = pct(r.first_tokens, 0.5) if r.streaming else None
        first_s = f"{first:.2f}" if first is not None else "-"
        first_added = f"{first - pct(base.first_tokens, 0.5):+.2f}" if (base and first is not None) else "-"
        rss = f"{r.rss_mb:.0f}" if r.rss_mb is not None else "-"
        cells = (
            r.name,
            f"{p50:.2f}",
            f"{p99:.2f}",
            added50,
            added99,
            first_s,
            first_added,
            f"{r.rps:.0f}",
            rss,
            str(r.errors),
        )
        print("| " + " | ".join(cells) + " |")
    print("\n+ columns: row minus its baseline (gateway: direct + capture fields; peers: direct).")


if __name__ == "__main__":
    main()
