"""A command's output as the harness keeps it: the first and last megabytes, the middle cut.

An agent can print a gigabyte, which the runner must not hold. The start says what ran and the end how it ended, so both
are kept, with a marker saying how much was cut.
"""

from __future__ import annotations

MAX_OUTPUT_BYTES = 8 * 1024 * 1024
"""Bytes kept of one stream (stdout or stderr) of one command: half from its start, half from its end."""


class CappedOutput:
    """Bytes appended as they arrive; at most `limit` are held."""

    def __init__(self, limit: int = MAX_OUTPUT_BYTES) -> None:
        self._half = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        """Bytes received, kept or not."""

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self._half:  # trimmed in batches: appends stay amortized O(1)
                del self._tail[: len(self._tail) - self._half]

    def __bytes__(self) -> bytes:
        tail = self._tail[-self._half :] if self._half else b""
        cut = self.total - len(self._head) - len(tail)
        marker = f"\n[agentbake: {cut} bytes of output cut here]\n".encode() if cut else b""
        return bytes(self._head) + marker + bytes(tail)

    def text(self) -> str:
        return bytes(self).decode(errors="replace")
