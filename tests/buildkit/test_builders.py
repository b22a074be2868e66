"""Decoding BuildKit's progress: steps begin when started, logs become output lines."""

from __future__ import annotations

from agentbake.buildkit.builders import _trace_events


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (all lengths here stay below 128)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def vertex(digest: bytes, name: str, started: bool) -> bytes:
    timestamp = field(1, b"\x08\x01") if started else b""  # a Timestamp message, only its presence counts
    return field(1, field(1, digest) + field(3, name.encode()) + (field(5, timestamp) if started else b""))


def test_only_started_steps_are_announced_once() -> None:
    seen: set[bytes] = set()
    listed = vertex(b"a", "[1/2] FROM debian", started=True) + vertex(b"b", "[2/2] RUN false", started=False)
    assert list(_trace_events(listed, seen)) == [("step", (1, 2, "FROM debian"))]
    running = vertex(b"a", "[1/2] FROM debian", started=True) + vertex(b"b", "[2/2] RUN false", started=True)
    assert list(_trace_events(running, seen)) == [("step", (2, 2, "RUN false"))]


def test_padded_numbers_and_internal_vertexes() -> None:
    message = vertex(b"x", "[internal] load build definition", True) + vertex(b"y", "[ 3/10] COPY a b", True)
    assert list(_trace_events(message, set())) == [("step", (3, 10, "COPY a b"))]


def test_logs_become_output_lines() -> None:
    log = field(3, field(1, b"a") + field(4, b"first\n\nsecond\n"))
    assert list(_trace_events(log, set())) == [("output", "first"), ("output", "second")]
