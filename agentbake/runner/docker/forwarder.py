"""TCP 127.0.0.1:<port> -> a unix socket, one connection each; runs INSIDE the sandbox, as root.

    python -I -S forwarder.py PORT SOCKET [PORT SOCKET ...]

The sandbox has only loopback; the gateway and egress proxy listen on unix sockets bind-mounted from the host.
Standard library only: it runs on the image's python, without agentbake. Threads, not asyncio: asyncio's import
costs a starting sandbox ten times the CPU. Each connection looks its socket up afresh (a warm sandbox gets its
gateway later); at most MAX_CONNECTIONS per port.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time

CHUNK = 65536
MAX_CONNECTIONS = 64


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(CHUNK):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)  # half-close: the peer may still send its answer
    except OSError:
        pass


def _relay(client: socket.socket, socket_path: str, slots: threading.BoundedSemaphore) -> None:
    try:
        _connect(client, socket_path)
    finally:
        slots.release()


def _connect(client: socket.socket, socket_path: str) -> None:
    with client:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with upstream:
            try:
                upstream.connect(socket_path)
            except OSError:
                return
            answers = threading.Thread(target=_answer, args=(upstream, client), daemon=True)
            answers.start()
            _pipe(client, upstream)
            answers.join()


def _answer(upstream: socket.socket, client: socket.socket) -> None:
    _pipe(upstream, client)
    # The gateway closed its end (its answer is complete, or it closed an idle connection): nothing the client
    # sends from now on reaches it, so stop reading the client too, which frees this connection's slot.
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_RD)


def serve(port: int, socket_path: str, host: str = "127.0.0.1") -> None:
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    with socket.create_server((host, port), backlog=128) as server:
        while True:
            # The relay is the container's main process: it must outlive a fork bomb at the pids limit
            # (no thread) or the agent using up file descriptors (no accept), else the sandbox ends.
            try:
                client, _ = server.accept()
            except OSError:
                time.sleep(0.05)
                continue
            if not slots.acquire(blocking=False):
                client.close()
                continue
            try:
                threading.Thread(target=_relay, args=(client, socket_path, slots), daemon=True).start()
            except RuntimeError:
                slots.release()
                client.close()


def serve_all(pairs: list[tuple[int, str]]) -> None:
    """Serve every (port, socket) pair, one listening thread each, until the process ends."""
    for port, socket_path in pairs[1:]:
        threading.Thread(target=serve, args=(port, socket_path), daemon=True).start()
    serve(*pairs[0])


def _pairs(argv: list[str]) -> list[tuple[int, str]]:
    if not argv or len(argv) % 2:
        sys.exit("usage: forwarder.py PORT SOCKET [PORT SOCKET ...]")
    return [(int(argv[i]), argv[i + 1]) for i in range(0, len(argv), 2)]


if __name__ == "__main__":
    serve_all(_pairs(sys.argv[1:]))
