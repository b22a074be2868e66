"""The one way agentbake serves an ASGI app: the gateway, the scripted model, test servers.

Every app runs with the same uvicorn settings, on a loopback TCP port or a unix socket:

    serve(app, port=8080)                                # blocking, for CLIs; Ctrl-C / SIGTERM stop it
    with serve_in_thread(app) as served:                 # a free port; returns once listening
        httpx.get(served.url + "/healthz")
    with serve_in_thread(app, uds=Path("gw.sock")) as served:
        httpx.Client(transport=httpx.HTTPTransport(uds=str(served.uds)), base_url=served.url)

The socket is bound here, before uvicorn starts, so port 0 yields the real port and a bind failure is an agentbake error
naming the address. `limits=ConnectionLimits(...)` bounds what clients may hold, since a rollout's gateway faces a
hostile agent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from agentbake.errors import ServeError

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger("agentbake.serve")

# In-flight requests get this long to finish once a server is told to stop.
_GRACE_S = 10
# How long serve_in_thread waits for the app's startup (lifespan) before giving up.
_STARTUP_TIMEOUT_S = 30.0
# Anyone may connect: a container's root, with every capability dropped, reaches the socket through a
# bind mount although it is not the socket file's owner.
UDS_MODE = 0o666
# The host part of a unix-socket URL is never resolved; it only fills the Host header.
_UDS_URL = "http://localhost"


@dataclass(frozen=True)
class ConnectionLimits:
    """What the clients of one server may hold at once: its file descriptors, its time, its memory."""

    max_connections: int
    """Open client connections; one past it is closed as it arrives, before a byte is read."""
    idle_timeout_s: float
    """Seconds a connection may take to deliver a whole request (head and body), counted from its opening
    or from the end of its previous answer; then it is closed. A connection that never sends, or sends a
    byte at a time, holds a descriptor this long at most."""
    max_head_bytes: int = 1024 * 1024
    """Bytes before a request's head (request line and headers) is complete; more is a 400 and a close."""


def _bind(host: str, port: int, uds: Path | None) -> socket.socket:
    """A listening-ready bound socket: `uds` when given, else TCP on host:port."""
    if uds is not None:
        _clear_stale_socket(uds)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(uds))
            os.chmod(uds, UDS_MODE)
        except OSError as exc:
            sock.close()
            raise ServeError(f"cannot listen on unix socket {uds}: {exc.strerror}") from exc
        return sock
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(
            f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port (0 = any free one)"
        ) from exc
    return sock


def _clear_stale_socket(path: Path) -> None:
    """Remove a socket file a dead server left behind; refuse a live one or a file that is no socket."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ServeError(f"cannot listen on unix socket {path}: the path exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink(missing_ok=True)
            return
    raise ServeError(f"cannot listen on unix socket {path}: another server is listening there")


def _url(sock: socket.socket, uds: Path | None, scheme: str = "http") -> str:
    if uds is not None:
        return _UDS_URL
    host, port = sock.getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


_logging_lock = threading.Lock()
_logging_configured = False


def _configure_uvicorn_logging() -> None:
    """uvicorn's handlers and formats, installed once per process.

    Left to uvicorn, each server resets its loggers to INFO for a moment, so another server's start line leaks."""
    global _logging_configured
    import logging.config

    from uvicorn.config import LOGGING_CONFIG

    with _logging_lock:
        if not _logging_configured:
            logging.config.dictConfig(LOGGING_CONFIG)
            _logging_configured = True


def _limited_protocol(limits: ConnectionLimits) -> type:
    """uvicorn's httptools protocol with `limits` applied on connections, idle time and head size.

    It relies on the protocol's internals, so pyproject.toml pins the uvicorn minor it was tested with."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _head_bytes = 0
        _awaiting_head = True  # bytes received now belong to a request's head

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                logger.warning("refused a connection: %d already open", limits.max_connections)
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._awaiting_head:
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_head_bytes:
                    self._disarm()
                    self.send_400_response(f"request head larger than {limits.max_head_bytes} bytes")
                    return
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._awaiting_head, self._head_bytes = False, 0
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._awaiting_head = True  # a pipelined request's head may follow
            self._disarm()  # the whole request arrived: the app's answer may take as long as it takes
            super().on_message_complete()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)
            super().on_response_complete()
            if not pipelined and not self.transport.is_closing():
                self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.idle_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return LimitedHttpToolsProtocol


def _server(
    app: Any,
    log_level: str,
    uds: Path | None,
    tls: tuple[Path, Path] | None = None,
    limits: ConnectionLimits | None = None,
) -> Any:
    import uvicorn  # here, so importing agentbake.serve stays cheap

    _configure_uvicorn_logging()

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Before uvicorn re-raises the SIGTERM it caught (which ends the process): no stale socket file.
            if uds is not None:
                uds.unlink(missing_ok=True)
            await super().shutdown(sockets)

    config = uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools" if limits is None else _limited_protocol(limits),
        ws="none",  # no app here speaks websockets; an upgrade would also leave the connection count
        log_config=None,  # installed once above; the level below is still set per server
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=_GRACE_S,
        ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None,
    )
    return Server(config)


def serve(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    uds: Path | None = None,
    log_level: str = "warning",
    limits: ConnectionLimits | None = None,
) -> None:
    """Serve `app` in this thread until Ctrl-C or SIGTERM, which is re-raised once the server has shut down.

    Listens on `uds` (a unix socket, mode 0o666) when given, else on TCP `host:port` (0 picks a free port). `limits`
    bound the clients. Raises ServeError when the address cannot be bound."""
    sock = _bind(host, port, uds)
    server = _server(app, log_level, uds, limits=limits)
    logging.getLogger("uvicorn.error").info("listening on %s", uds or _url(sock, uds))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if uds is not None:
            uds.unlink(missing_ok=True)


class ServedApp:
    """An app served by a background thread; a context manager that stops it on exit."""

    def __init__(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        uds: Path | None,
        log_level: str,
        tls: tuple[Path, Path] | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self._sock = _bind(host, port, uds)
        self.uds: Path | None = uds
        """The unix socket listened on, or None for TCP."""
        self.url: str = _url(self._sock, uds, "https" if tls else "http")
        """Base URL without a trailing slash: `http://127.0.0.1:PORT` (`https://` with `tls`), or
        `http://localhost` over `uds` (give the client a transport that dials the socket)."""
        self._server = _server(app, log_level, uds, tls, limits)
        self._thread = threading.Thread(target=self._run, name=f"agentbake-serve {self.url}", daemon=True)
        self._failure: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # uvicorn reports a failed startup with sys.exit
            self._failure = exc

    def start(self) -> ServedApp:
        """Start serving and return once the socket accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive():
                self._cleanup()
                raise ServeError(f"the app served on {self.uds or self.url} failed during startup: {self._failure!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServeError(
                    f"the app served on {self.uds or self.url} did not start in {_STARTUP_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop accepting connections, let in-flight requests finish (up to 10 s), and wait for the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=_GRACE_S + 5)
        self._cleanup()

    def _cleanup(self) -> None:
        self._sock.close()
        if self.uds is not None:
            with contextlib.suppress(OSError):
                self.uds.unlink(missing_ok=True)

    def __enter__(self) -> ServedApp:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


def serve_in_thread(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    uds: Path | None = None,
    log_level: str = "warning",
    tls: tuple[Path, Path] | None = None,
    limits: ConnectionLimits | None = None,
) -> ServedApp:
    """Serve `app` from a daemon thread; returns once it is listening (port 0 picks a free port).

    `tls` = (certificate chain PEM, private key PEM) serves HTTPS; `limits` bound the clients. Use as a
    context manager or call `.stop()`. Raises ServeError when the address cannot be bound or the app's
    startup fails."""
    return ServedApp(app, host=host, port=port, uds=uds, log_level=log_level, tls=tls, limits=limits).start()
