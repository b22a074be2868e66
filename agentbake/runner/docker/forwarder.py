"""TCP 127.0.0.1:<port> -> a unix socket, one connection each; runs INSIDE the sandbox, as root.

    python -I -S forwarder.py PORT SOCKET

The agent's container has no network (`network_mode="none"`): only loopback. The rollout's gateway
listens on a unix socket on the host, whose folder is bind-mounted read-only into the container; this
relay lets an agent that only speaks HTTP over TCP reach it at `http://127.0.0.1:<port>`.

Standard library only, and no agentbake import: the Docker backend runs this file by path with the
image's baked python (label `dev.agentbake.python`), which has no agentbake installed. Threads, not
asyncio: importing asyncio costs a starting sandbox ten times the CPU. The socket need not exist when
the relay starts (a warm-pool sandbox gets its gateway later): each connection looks it up afresh and
is closed when it is missing.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

CHUNK = 65536


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(CHUNK):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)  # half-close: the peer may still send its answer
    except OSError:
        pass


def _relay(client: socket.socket, socket_path: str) -> None:
    with client:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with upstream:
            try:
                upstream.connect(socket_path)
            except OSError:
                return
            answers = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
            answers.start()
            _pipe(client, upstream)
            answers.join()


def serve(port: int, socket_path: str, host: str = "127.0.0.1") -> None:
    with socket.create_server((host, port), backlog=128) as server:
        while True:
            # The relay is the container's main process: it must outlive a fork bomb at the pids limit
            # (no thread) or the agent using up file descriptors (no accept), else the sandbox ends.
            try:
                client, _ = server.accept()
            except OSError:
                time.sleep(0.05)
                continue
            try:
                threading.Thread(target=_relay, args=(client, socket_path), daemon=True).start()
            except RuntimeError:
                client.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
