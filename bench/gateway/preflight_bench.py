"""What the preflight costs a runner's start: `run_preflight` (the model list, a unary and a streaming
call, then the same prompt at two temperatures) beside one direct chat call and the same four calls made
directly, on the scripted model over loopback. Prints a table of p50 / p95 milliseconds.

    python bench/gateway/preflight_bench.py [--runs 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx

from agentbake.gateway import GatewayConfig
from agentbake.gateway.preflight import run_preflight
from agentbake.gateway.preflight_probes import PING_TOOL, PROMPT, SAMPLING_TEMPERATURES
from agentbake.scripted import Reply, ScriptedModel
from agentbake.serve import serve_in_thread

REPO = Path(__file__).resolve().parents[2]
sys.path[0] = str(REPO)  # the repo in place of this folder, whose bench.py would shadow the bench package

from bench.gateway.bench import timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs

    model = ScriptedModel(keep_log=False)
    model.responder = lambda request: Reply(text="", tool_calls=[("ping", {})])
    with serve_in_thread(model, log_level="critical") as server, httpx.Client(base_url=server.url + "/v1") as client:
        body = {"model": "scripted", "messages": [{"role": "user", "content": PROMPT}], "tools": [PING_TOOL]}
        body |= {"max_tokens": 16, "logprobs": True, "top_logprobs": 1, "return_token_ids": True}

        def one_call() -> None:
            client.post("/chat/completions", json={**body, "temperature": 0}).raise_for_status()

        def four_calls() -> None:
            client.get("/models").raise_for_status()
            one_call()
            client.post("/chat/completions", json={**body, "stream": True}).raise_for_status()
            for temperature in SAMPLING_TEMPERATURES:
                sampled = {**body, "temperature": temperature, "top_logprobs": 5}
                client.post("/chat/completions", json=sampled).raise_for_status()

        config = GatewayConfig(upstream=server.url + "/v1")
        rows = [
            ("one direct chat call (baseline)", timed(one_call, runs)),
            ("the preflight's calls, made directly", timed(four_calls, runs)),
            ("run_preflight (calls + checks)", timed(lambda: run_preflight(config), runs)),
        ]
    print(f"{'row':<40} {'p50 ms':>8} {'p95 ms':>8}")
    for name, (p50, p95) in rows:
        print(f"{name:<40} {p50:>8.2f} {p95:>8.2f}")


if __name__ == "__main__":
    main()
