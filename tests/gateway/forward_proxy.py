"""A small HTTP forward proxy on loopback, in a thread: absolute-form requests and CONNECT tunnels, as corporate
proxies serve them. The egress proxy cannot stand in: it refuses loopback upstreams by design."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from urllib.parse import urlsplit


class ForwardProxy:
    """Relays each connection to the origin its first request names; `heads` holds those first request heads.
    `refuse_connect` answers CONNECT with that status line instead."""

    def __init__(self, refuse_connect: str | None = None) -> None:
        self.refuse_connect = refuse_connect
        self.heads: list[bytes] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        assert self._ready.wait(10), "the proxy never started"
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        for writer in self._writers:  # servers behind it need not wait out kept-alive tunnels
            writer.close()
        self._loop.run_until_complete(asyncio.sleep(0.01))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self._writers.add(writer)
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
            if method == "CONNECT":
                if self.refuse_connect:
                    writer.write(f"HTTP/1.1 {self.refuse_connect}\r\ncontent-length: 0\r\n\r\n".encode())
                    return
                host, port = target.rsplit(":", 1)
                origin_reader, origin_writer = await asyncio.open_connection(host, int(port))
                self._writers.add(origin_writer)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                parts = urlsplit(target)
                origin_reader, origin_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
                self._writers.add(origin_writer)
                origin_writer.write(head)  # absolute-form, which every HTTP/1.1 server accepts
            await asyncio.gather(_pipe(reader, origin_writer), _pipe(origin_reader, writer))
        writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()
