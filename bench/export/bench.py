"""Export speed and memory on a generated trace, beside plain JSON parsing of the same file.

    .venv/bin/python bench/export/bench.py [--records 100000] [--calls 50] [--concurrent 64]

Generates a trace of `--records` records: rollouts of `--calls` tool-loop calls each (every prompt extends
the previous call's prompt + completion, one retry every 10 calls, a toolless side call per rollout),
`--concurrent` rollouts interleaved as one gateway serving them at once writes them. Each row runs in a
fresh process (so peak RSS is that row's own) over the same file:
  json.loads / orjson.loads  every line parsed, nothing kept (the floor any exporter pays once)
  read_trace                 the gateway's typed reader, every record in memory (what a naive export holds)
  agentbake export           `write_sequences` of every rollout to a file (two passes, one rollout in memory)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]

ROWS = {
    "json.loads every line": "baseline_json",
    "orjson.loads every line": "baseline_orjson",
    "read_trace (all in memory)": "read_trace",
    "agentbake export": "export",
}


def generate(path: Path, records: int, calls: int, concurrent: int, seed: int = 7) -> None:
    """A trace shaped like many concurrent tool-loop rollouts."""
    rng = random.Random(seed)
    fresh = iter(range(1000, 1 << 40))
    tools_offered = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]

    def line(
        rollout: str,
        turn: int,
        prompt: list[int],
        completion: list[int],
        *,
        tools: bool = True,
        retry_of: int | None = None,
    ) -> bytes:
        request = {"model": "m", "messages": [{"role": "user", "content": "work"}], "stream": True}
        if tools:
            request["tools"] = tools_offered
        record = {
            "turn": turn,
            "request": request,
            "response": {"choices": [{"message": {"role": "assistant", "content": "x"}}]},
            "logprobs": [],
            "completion_tokens": len(completion),
            "completion_token_ids": completion,
            "per_token_logps": [round(-rng.random(), 6) for _ in completion],
            "finish_reason": "stop",
            "latency_s": 0.01,
            "timestamp": 0.0,
            "schema_version": 1,
            "rollout_id": rollout,
            "dialect": "anthropic",
            "prompt_token_ids": prompt,
            "upstream_status": 200,
            "upstream_error": None,
            "retry_of": retry_of,
        }
        return orjson.dumps(record) + b"\n"

    def rollout(number: int):
        name = f"rollout-{number:06d}"
        prompt = [next(fresh) for _ in range(60)]
        turn = 0
        while turn < calls:
            completion = [next(fresh) for _ in range(rng.randint(5, 25))]
            if turn == 1:  # a side call without tools (a title)
                yield line(name, turn, [next(fresh) for _ in range(40)], completion[:5], tools=False)
                turn += 1
                continue
            if turn % 10 == 9:  # a cut answer, then its retry
                yield line(name, turn, prompt, completion[:3])
                turn += 1
                yield line(name, turn, prompt, completion, retry_of=turn - 1)
            else:
                yield line(name, turn, prompt, completion)
            turn += 1
            prompt = prompt + completion + [next(fresh) for _ in range(rng.randint(5, 15))]

    written, number = 0, 0
    active: list = []
    with path.open("wb") as file:
        while written < records:
            while len(active) < concurrent:
                active.append(rollout(number))
                number += 1
            current = rng.choice(active)
            try:
                file.write(next(current))
                written += 1
            except StopIteration:
                active.remove(current)


def measure(kind: str, trace: Path) -> dict:
    """Run one row in this process; seconds and records."""
    start = time.perf_counter()
    records = 0
    if kind in ("baseline_json", "baseline_orjson"):
        loads = json.loads if kind == "baseline_json" else orjson.loads
        with trace.open("rb") as file:
            for line in file:
                loads(line)
                records += 1
    elif kind == "read_trace":
        from agentbake.gateway.trace import read_trace

        records = len(read_trace(trace))
    else:
        from agentbake.export import write_sequences

        with tempfile.TemporaryDirectory() as out:
            summaries = write_sequences(trace, Path(out) / "sequences.jsonl")
            records = sum(s["calls"] for s in summaries)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"seconds": seconds, "records": records, "peak_mib": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=50, help="calls per rollout")
    parser.add_argument("--concurrent", type=int, default=64, help="rollouts interleaved in the file")
    parser.add_argument("--measure", choices=sorted(ROWS.values()), help=argparse.SUPPRESS)
    parser.add_argument("--trace", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.trace)))
        return
    with tempfile.TemporaryDirectory() as work:
        trace = Path(work) / "trace.jsonl"
        generate(trace, args.records, args.calls, args.concurrent)
        size = trace.stat().st_size / 2**20
        print(f"trace: {args.records} records, {size:.0f} MiB, {args.concurrent} rollouts interleaved", file=sys.stderr)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        print(f"| {'row':<28} | {'seconds':>8} | {'records/s':>10} | {'peak RSS MiB':>12} |")
        print(f"|{'-' * 30}|{'-' * 10}:|{'-' * 11}:|{'-' * 13}:|")
        for label, kind in ROWS.items():
            command = [sys.executable, __file__, "--measure", kind, "--trace", str(trace)]
            result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout)
            rate = result["records"] / result["seconds"]
            print(f"| {label:<28} | {result['seconds']:>8.2f} | {rate:>10,.0f} | {result['peak_mib']:>12.0f} |")


if __name__ == "__main__":
    main()
