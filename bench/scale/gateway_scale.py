"""Many concurrent sessions through the gateway: sessions/s and added latency at 64/256/512 at once.

    .venv/bin/python bench/scale/gateway_scale.py                       # ~6 min on 2 cores
    .venv/bin/python bench/scale/gateway_scale.py --sessions 64,256 --think-ms 0 --turns 2   # smoke run

One scripted vLLM-shaped upstream (agentbake.scripted, its own process) and, in the same run, per level of
concurrency N, N sessions at once against three targets:
- direct: the upstream called with the fields the gateway injects (logprobs, token ids): the baseline;
- one gateway: a single `agentbake gateway` process (its own process, TCP), each session its own
  `/r/<session>/` rollout path, as one shared gateway in front of a cluster's sandboxes would serve them;
- runner: the runner's own arrangement, in one process as the runner holds it: a gateway per session
  (`RolloutGateways.start_on_host`, each on its unix socket in a thread, its own trace and token) behind the
  gateway relay (`GatewayRelay`, one TCP port routing `/r/<rollout>/`), as remote sandboxes reach it.
A session is a multi-turn conversation in the Anthropic dialect (Claude Code's): each turn sends the whole
conversation so far (a system prompt of --prompt-kb, then every earlier turn) and waits for the answer; the
direct baseline sends the same conversation as chat completions. Between turns a session thinks
(--think-ms, jittered 0.5-1.5x, seeded; 0 = back to back, the closed loop that finds the ceiling). Each of
the N clients runs --rounds sessions one after another. sessions/s = sessions / the row's wall time;
"+p50/+p99" = the row's per-request percentile minus the direct row's at the same N and think time;
"CPU ms/req" = CPU seconds of the serving process (the upstream, the gateway, or the runner's process) per
request, "client CPU ms/req" the load generator's own. The runner side is also measured with no traffic for
5 s after its start: RSS and CPU of N gateways whose agents are all thinking.
Everything shares the machine's cores: client, upstream and gateways. All loops are bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the gateway bench's client and process helpers

from bench.gateway.bench import (  # noqa: E402
    Connection,
    Server,
    free_port,
    gateway_server,
    http_post,
    pct,
    tree_rss_mb,
)

MODEL = "claude-bench"
ANTHROPIC = {"anthropic-version": "2023-06-01"}
CAPTURE = {"logprobs": True, "top_logprobs": 1, "return_tokens_as_token_ids": True, "return_token_ids": True}
REPLY = "Hello from the scripted model."  # the scripted model's default answer, replayed as the next turn's history
REQUEST_TIMEOUT_S = 60.0
IDLE_S = 5.0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


# -- sessions -------------------------------------------------------------------------------------------


@dataclass
class Target:
    """Where a session's requests go and how each turn is spelled there."""

    name: str
    port: int
    dialect: str  # "chat" (the upstream, with the capture fields) or "anthropic" (a gateway)
    tokens: list[str] = field(default_factory=list)  # per session (runner: each rollout's own)
    pid: int | None = None  # the serving process whose CPU is counted

    def request(self, session: int, system: str, history: list[str], prompt: str) -> bytes:
        turns = [*history, prompt]
        if self.dialect == "chat":
            messages = [{"role": "system", "content": system}]
            messages += [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(turns)]
            body = {"model": "fake-model", "messages": messages, "max_tokens": 256, **CAPTURE}
            return http_post(self.port, "/v1/chat/completions", body, {})
        messages = [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(turns)]
        body = {"model": MODEL, "system": system, "messages": messages, "max_tokens": 256}
        token = self.tokens[session] if self.tokens else "dummy"
        return http_post(self.port, f"/r/s{session}/v1/messages", body, {**ANTHROPIC, "x-api-key": token})


@dataclass
class Row:
    target: str
    concurrency: int
    think_ms: float
    latencies: list[float] = field(default_factory=list)
    sessions: int = 0
    errors: int = 0
    wall: float = 0.0
    cpu_s: float | None = None
    client_cpu_s: float = 0.0
    rss_mb: float | None = None
    threads: int | None = None


async def run_sessions(target: Target, n: int, args: argparse.Namespace, think_ms: float) -> Row:
    """N clients at once, each `args.rounds` sessions of `args.turns` turns on one keep-alive connection."""
    row = Row(target.name, n, think_ms)
    system = ("You are a coding agent. " * (args.prompt_kb * 1024 // 24 + 1))[: args.prompt_kb * 1024]
    rng = random.Random(n * 1000 + int(think_ms))
    deadline = time.perf_counter() + args.max_row_s

    async def pause() -> None:
        if think_ms:
            await asyncio.sleep(think_ms / 1000 * rng.uniform(0.5, 1.5))

    async def client(session: int) -> None:
        if think_ms:  # staggered starts: N sessions do not all send their first turn in the same instant
            await asyncio.sleep(think_ms / 1000 * session / n)
        conn: Connection | None = None
        for _ in range(args.rounds):
            history: list[str] = []
            for turn in range(args.turns):
                if time.perf_counter() > deadline:
                    break
                prompt = f"Turn {turn} of session {session}: run the next step."
                raw = target.request(session, system, history, prompt)
                started = time.perf_counter()
                try:
                    conn = conn or await Connection.open(target.port)
                    status, _, _ = await asyncio.wait_for(conn.request(raw), REQUEST_TIMEOUT_S)
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, IndexError):
                    status = 0
                    if conn is not None:
                        conn.close()
                    conn = None
                row.latencies.append(time.perf_counter() - started)
                row.errors += status != 200
                history += [prompt, REPLY]
                if turn < args.turns - 1:
                    await pause()
            row.sessions += 1
            await pause()
        if conn is not None:
            conn.close()

    cpu_before = process_cpu_s(target.pid) if target.pid else None
    client_cpu, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(n)))
    row.wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    row.client_cpu_s = after.ru_utime + after.ru_stime - client_cpu.ru_utime - client_cpu.ru_stime
    if target.pid:
        row.cpu_s = process_cpu_s(target.pid) - (cpu_before or 0.0)
        row.rss_mb = tree_rss_mb(target.pid)
        row.threads = threads(target.pid)
    return row


# -- the runner's side: a gateway per session behind the relay, in one process ---------------------------


def serve_rollouts(upstream: str, count: int, port: int, work: str) -> None:
    """Entry point of the runner-side process (`--serve-rollouts`): `count` per-rollout gateways as the
    runner starts them, the relay in front on `port`; prints one JSON line (start-up, tokens), then serves
    until stdin closes."""
    from agentbake.runner.model.gateways import RolloutGateways
    from agentbake.runner.model.host_gateway import GATEWAY_SOCKET
    from agentbake.runner.model.workers import Worker
    from agentbake.runner.remote.relay import GatewayRelay
    from agentbake.runner.remote.relay_config import RelayConfig
    from agentbake.runner.runner_config import RunnerConfig

    started = time.perf_counter()

    def worker_failed(worker: Worker, rollout_ids: list[str]) -> None:  # the runner ends them; here, said
        print(f"the upstream failed ({worker.failure}) under {len(rollout_ids)} sessions", file=sys.stderr)

    gateways = RolloutGateways(RunnerConfig(image="bench", model=upstream, model_name="fake-model"), worker_failed)
    relay = GatewayRelay(RelayConfig(listen_port=port))
    served, tokens, folders = [], [], []
    for i in range(count):
        token = secrets.token_urlsafe(24)
        folder, app = gateways.start_on_host(f"s{i}", token, Path(work) / f"s{i}.jsonl")
        relay.register(f"s{i}", str(folder / GATEWAY_SOCKET))
        served.append(app)
        folders.append(folder)
        tokens.append(token)
    print(json.dumps({"start_s": time.perf_counter() - started, "tokens": tokens}), flush=True)
    sys.stdin.read()
    relay.close()
    with ThreadPoolExecutor(64) as pool:  # as rollouts end at once; one by one each waits for its loop's tick
        list(pool.map(lambda app: app.stop(), served))
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


# -- the run ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="64,256,512", help="concurrent sessions per level, comma-separated")
    parser.add_argument("--think-ms", default="0,2000", help="pause between turns per row set, comma-separated")
    parser.add_argument("--turns", type=int, default=4, help="model calls per session")
    parser.add_argument("--rounds", type=int, default=2, help="sessions each client runs one after another")
    parser.add_argument("--prompt-kb", type=int, default=8, help="size of every call's system prompt")
    parser.add_argument("--max-row-s", type=float, default=60.0, help="a row stops starting turns after this")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-rollouts", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        from agentbake.scripted import ScriptedModel
        from agentbake.serve import serve

        serve(ScriptedModel(keep_log=False), port=args.serve_upstream)
        return
    if args.serve_rollouts:
        upstream, count, port, work = args.serve_rollouts
        serve_rollouts(upstream, int(count), int(port), work)
        return
    import subprocess

    import uvloop

    levels = [int(n) for n in args.sessions.split(",")]
    thinks = [float(t) for t in args.think_ms.split(",")]
    work = Path(tempfile.mkdtemp(prefix="agentbake-scale-bench-"))
    load_start = os.getloadavg()
    servers: list[Server] = []
    rows: list[Row] = []
    starts: dict[int, tuple[float, float, float]] = {}  # N -> runner side's start-up s, RSS MB, idle CPU %
    probe = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    try:
        up_port = free_port()
        upstream = Server("upstream", [sys.executable, __file__, "--serve-upstream", str(up_port)])
        servers.append(upstream)
        upstream.wait_ready(up_port, http_post(up_port, "/v1/chat/completions", probe, {}), 60)
        upstream_url = f"http://127.0.0.1:{up_port}/v1"
        gw_port = free_port()
        gateway = gateway_server(
            upstream_url,
            gw_port,
            work / "shared.jsonl",
            "--model-override",
            "fake-model",
            "--max-client-connections",
            str(max(levels) + 64),  # one per session; the default (64) is a per-rollout gateway's
        )
        servers.append(gateway)
        gateway.wait_ready(gw_port, http_post(gw_port, "/v1/chat/completions", probe, {}), 60)
        direct = Target("direct (baseline)", up_port, "chat", pid=upstream.process.pid)
        shared = Target("one gateway process", gw_port, "anthropic", pid=gateway.process.pid)
        for n in levels:
            port = free_port()
            rollouts = subprocess.Popen(
                [sys.executable, __file__, "--serve-rollouts", upstream_url, str(n), str(port), str(work)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            try:
                ready = json.loads(rollouts.stdout.readline() or "{}")
                if "tokens" not in ready:
                    sys.exit(f"the runner side with {n} gateways did not start (exit {rollouts.wait(30)})")
                idle = process_cpu_s(rollouts.pid)
                time.sleep(IDLE_S)  # no traffic: what N served gateways cost while their agents think
                idle = (process_cpu_s(rollouts.pid) - idle) / IDLE_S * 100
                starts[n] = (ready["start_s"], tree_rss_mb(rollouts.pid), idle)
                runner = Target("runner: gateway per session + relay", port, "anthropic", ready["tokens"], rollouts.pid)
                for think in thinks:
                    for target in (direct, shared, runner):
                        rows.append(uvloop.run(run_sessions(target, n, args, think)))
                        print(
                            f"  {target.name} N={n} think={think:.0f} ms: {rows[-1].sessions} sessions", file=sys.stderr
                        )
            finally:
                rollouts.stdin.close()
                rollouts.wait(60)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)  # the traces: ~550 MB for a full run
    load_end = os.getloadavg()
    report(rows, starts, args, load_start, load_end)


def report(
    rows: list[Row],
    starts: dict[int, tuple[float, float, float]],
    args: argparse.Namespace,
    load_start: tuple[float, float, float],
    load_end: tuple[float, float, float],
) -> None:
    print(f"\n# Concurrent sessions through the gateway ({os.cpu_count()} cores, everything on loopback)\n")
    print(f"load average at start {load_start[0]:.2f}, at end {load_end[0]:.2f}")
    print(
        f"{args.turns} turns per session, {args.rounds} sessions per client, {args.prompt_kb} KiB system prompt, "
        "Anthropic dialect through the gateways, chat completions + capture fields direct\n"
    )
    base = {(r.concurrency, r.think_ms): r for r in rows if r.target.startswith("direct")}
    header = ("N", "think ms", "target", "sessions/s", "req/s", "p50 ms", "p99 ms", "+p50 ms", "+p99 ms")
    header += ("CPU ms/req", "client CPU ms/req", "RSS MB", "threads", "errors")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        b = base[(r.concurrency, r.think_ms)]
        p50, p99 = pct(r.latencies, 0.5), pct(r.latencies, 0.99)
        is_base = r is b
        cells = (
            str(r.concurrency),
            f"{r.think_ms:.0f}",
            r.target,
            f"{r.sessions / r.wall:.1f}",
            f"{len(r.latencies) / r.wall:.0f}",
            f"{p50:.1f}",
            f"{p99:.1f}",
            "-" if is_base else f"{p50 - pct(b.latencies, 0.5):+.1f}",
            "-" if is_base else f"{p99 - pct(b.latencies, 0.99):+.1f}",
            "-" if r.cpu_s is None else f"{r.cpu_s / max(1, len(r.latencies)) * 1000:.2f}",
            f"{r.client_cpu_s / max(1, len(r.latencies)) * 1000:.2f}",
            "-" if r.rss_mb is None else f"{r.rss_mb:.0f}",
            "-" if r.threads is None else str(r.threads),
            str(r.errors),
        )
        print("| " + " | ".join(cells) + " |")
    print("\nThe runner side per N (RolloutGateways + relay + N gateways): start, RSS and CPU with no traffic\n")
    print("| N | start s | per gateway ms | RSS MB idle | per gateway MB | idle CPU % of a core |")
    print("|---|---|---|---|---|---|")
    for n, (start_s, rss, idle) in starts.items():
        print(f"| {n} | {start_s:.2f} | {start_s / n * 1000:.1f} | {rss:.0f} | {rss / n:.2f} | {idle:.1f} |")


if __name__ == "__main__":
    main()
