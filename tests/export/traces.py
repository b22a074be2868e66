"""Hand-built trace records for export tests (the gateway-made traces are in test_gateway_traces.py)."""

from __future__ import annotations

from pathlib import Path

import orjson


def record(turn: int, prompt: list[int] | None, completion: list[int], **fields) -> dict:
    """A successful call as the gateway records it, with logprobs -0.<id>."""
    base = {
        "turn": turn,
        "request": {"model": "m", "messages": [], "tools": [{"type": "function"}]},
        "response": {"choices": []},
        "logprobs": [],
        "completion_tokens": len(completion),
        "completion_token_ids": completion,
        "per_token_logps": [-(i % 97) / 100 for i in completion],
        "finish_reason": "stop",
        "latency_s": 0.1,
        "timestamp": 1.0,
        "schema_version": 1,
        "rollout_id": "r",
        "dialect": "openai",
        "prompt_token_ids": prompt,
        "upstream_status": 200,
        "upstream_error": None,
        "retry_of": None,
    }
    return {**base, **fields}


def write(path: Path, records: list[dict], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)
    return path
