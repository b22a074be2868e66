"""`--gateway host` for remote sandboxes: one TCP port on the trainer's machine in front of every rollout's
gateway (each listens on a unix socket of its own, as on Docker).

A remote sandbox calls `<url>/r/<rollout_id>/v1/...`; the relay reads the request line, finds that
rollout's gateway socket and from then on copies bytes both ways without parsing them, so streaming and
keep-alive are the gateway's own. A connection is bound to the rollout its first request names; the
gateway itself refuses a later request for another rollout (403) and any request without the rollout's
token (401). The upstream key stays in this process: the sandbox holds only its rollout's token.
What a sandbox can hold here is bounded: MAX_PER_ROLLOUT connections relayed to its gateway (then 503),
and 60 s of silence before its request line; connections still silent are at most a quarter of the process's
descriptors (`unrouted_bound`), the oldest closed when one more arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import threading
from pathlib import Path

from agentbake.errors import SandboxError
from agentbake.runner.remote.relay_config import RelayConfig

_REQUEST_LINE = re.compile(rb"^[A-Z]+ /r/([A-Za-z0-9._:-]{1,128})/\S* HTTP/1\.[01]\r\n")
_MAX_REQUEST_LINE = 8192
_REQUEST_LINE_TIMEOUT_S = 60.0
"""Seconds a connection may take to send its request line; a silent one is closed (it holds descriptors)."""
_MIN_UNROUTED = 64
_NR_OPEN_DEFAULT = 1 << 20
"""Linux's default ceiling on a process's descriptors: what an unlimited RLIMIT_NOFILE comes to."""
MAX_PER_ROLLOUT = 64
"""Connections relayed at once to one rollout's gateway (its own limit); one more gets a 503."""


class GatewayRelay:
    """A TCP listener in a thread of its own; `register(rollout_id, socket)` makes a rollout reachable."""

    def __init__(self, config: RelayConfig, *, max_unrouted: int | None = None) -> None:
        """`max_unrouted`: connections held before their request line (default `unrouted_bound()`)."""
        self.config = config
        self.max_unrouted = unrouted_bound() if max_unrouted is None else max_unrouted
        self._routes: dict[str, str] = {}
        # Touched by the relay's event loop only: the silent connections, oldest first.
        self._unrouted: dict[asyncio.StreamWriter, None] = {}
        self._relayed: dict[str, int] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(started,), name="agentbake-relay", daemon=True)
        self._thread.start()
        started.wait(30)
        if self._failure is not None or self._server is None:
            raise SandboxError(
                f"the gateway relay cannot listen on {config.listen_host}:{config.listen_port}: {self._failure}; "
                "pick another port"
            )
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = (config.public_url or f"http://{config.listen_host}:{self.port}").rstrip("/")

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, self.config.listen_host, self.config.listen_port)
            )
        except OSError as exc:
            self._failure = exc
            started.set()
            return
        started.set()
        self._loop.run_forever()

    def register(self, rollout_id: str, socket_path: str) -> str:
        """Route `/r/<rollout_id>/` to the gateway on `socket_path`; returns the sandbox's model URL."""
        if not Path(socket_path).exists():
            raise SandboxError(f"gateway socket {socket_path} does not exist; start the gateway first")
        with self._lock:
            self._routes[rollout_id] = socket_path
        return f"{self.url}/r/{rollout_id}"

    def unregister(self, rollout_id: str) -> None:
        with self._lock:
            self._routes.pop(rollout_id, None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self._unrouted[writer] = None
            if len(self._unrouted) > self.max_unrouted:
                # The oldest goes, not the newest: refusing new ones would let a sandbox's idle sockets lock the
                # others out for the timeout, while a client that sends its request line at once is rarely oldest.
                oldest = next(iter(self._unrouted))
                del self._unrouted[oldest]
                oldest.close()  # its read below ends at once
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n"), _REQUEST_LINE_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            finally:
                self._unrouted.pop(writer, None)
            match = _REQUEST_LINE.match(head) if len(head) <= _MAX_REQUEST_LINE else None
            rollout = match.group(1).decode() if match else ""
            with self._lock:
                target = self._routes.get(rollout)
            if target is not None and self._relayed.get(rollout, 0) >= MAX_PER_ROLLOUT:
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            if target is None:
                body = b"no such rollout on this relay\n"
                writer.write(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Type: text/plain\r\n")
                writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                return
            try:
                up_reader, up_writer = await asyncio.open_unix_connection(target)
            except OSError:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            up_writer.write(head)
            self._relayed[rollout] = self._relayed.get(rollout, 0) + 1
            try:
                await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            finally:
                left = self._relayed.pop(rollout) - 1
                if left:
                    self._relayed[rollout] = left
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def close(self) -> None:
        def stop() -> None:
            if self._server is not None:
                self._server.close()
            self._loop.stop()

        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(stop)
            self._thread.join(10)


def unrouted_bound() -> int:
    """A quarter of the process's descriptors (RLIMIT_NOFILE's soft limit), at least 64: room for a burst of
    sandboxes connecting at once, while silent connections never starve the relayed ones, gateways and clients."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = _NR_OPEN_DEFAULT
    return max(_MIN_UNROUTED, soft // 4)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
