"""Server-sent events, both ways: decoding the upstream's byte stream into event data, and encoding the
events sent to clients.
"""

from __future__ import annotations

import orjson


class SSEDecoder:
    """Incremental SSE decoder yielding the `data` of each event (fields other than data carry nothing
    chat completions need). Tolerates CRLF line ends and events split across reads. Comment lines (vLLM's
    `: keep-alive`) carry no data; `comments` counts them so the relay can keep its own client alive."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self.comments = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        events: list[bytes] = []
        for line in lines:
            self._line(line.rstrip(b"\r"), events)
        return events

    def close(self) -> list[bytes]:
        """Events still pending when the stream ended without a final blank line."""
        events: list[bytes] = []
        if self._buffer:
            self._line(self._buffer.rstrip(b"\r"), events)
            self._buffer = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        if not line:
            if self._data:
                events.append(b"\n".join(self._data))
                self._data = []
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        elif line.startswith(b":"):
            self.comments += 1


def sse_event(name: str, data: dict) -> bytes:
    """One named SSE event (the Anthropic stream's framing)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def sse_events(events: list[tuple[str, dict]]) -> bytes:
    """Several named events, in order, as one write."""
    return b"".join(sse_event(name, data) for name, data in events)


def sse_data(data: dict) -> bytes:
    """One unnamed `data:` event (the OpenAI stream's framing)."""
    return b"data: " + orjson.dumps(data) + b"\n\n"
