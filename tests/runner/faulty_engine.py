"""A unix-socket relay in front of the real Docker engine that fails chosen requests, to test retries.

Requests are parsed just enough to see their method and path (docker-py sends a Content-Length body
or none); every other byte is relayed as is, and a connection upgraded for an exec stream becomes a
plain two-way relay.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path


class FaultyEngine:
    """Answers the first `failures` requests whose "METHOD path" matches `pattern` with `status`."""

    def __init__(self, socket_path: Path, engine_socket: str, pattern: str, failures: int, status: int = 500):
        self.socket_path = socket_path
        self.engine_socket = engine_socket
        self.pattern = re.compile(pattern)
        self.failures = failures
        self.status = status
        self.matched = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FaultyEngine:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _shutdown(self) -> None:
        self._server.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_unix_server(self._client, str(self.socket_path)))
        self._ready.set()
        self._loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        engine: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        answers: asyncio.Task[None] | None = None  # engine -> client, relayed as is
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if self.pattern.search(f"{method} {path}"):
                    self.matched += 1
                    if self.failures > 0:
                        self.failures -= 1
                        message = b'{"message":"injected by the test"}'
                        writer.write(
                            f"HTTP/1.1 {self.status} Injected\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(message)}\r\nConnection: close\r\n\r\n".encode()
                            + message
                        )
                        await writer.drain()
                        return
                if engine is None:
                    engine = await asyncio.open_unix_connection(self.engine_socket)
                    answers = asyncio.ensure_future(_pipe(engine[0], writer))
                engine[1].write(head + body)
                await engine[1].drain()
                if headers.get("upgrade"):
                    await asyncio.gather(_pipe(reader, engine[1]), answers)
                    return
        finally:
            if engine is not None:
                engine[1].close()
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
