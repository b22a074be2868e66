"""TCP 127.0.0.1:<port> -> a unix socket, one connection each; runs INSIDE the sandbox, as root.

The agent's container has no network (`network_mode="none"`): only loopback. The rollout's gateway
listens on a unix socket on the host, whose folder is bind-mounted read-only into the container; this
relay lets an agent that only speaks HTTP over TCP reach it at `http://127.0.0.1:<port>`.

Standard library only, and no agentbake import: the Docker backend runs this file by path with the
image's baked python (label `dev.agentbake.python`), which has no agentbake installed. The socket
need not exist when the relay starts (a warm-pool sandbox gets its gateway later): each connection
looks it up afresh and is closed when it is missing.
"""

from __future__ import annotations

import argparse
import asyncio

CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # half-close: the peer still sends its answer
    except (ConnectionError, OSError):
        writer.close()


async def _relay(socket_path: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    try:
        upstream_r, upstream_w = await asyncio.open_unix_connection(socket_path)
    except OSError:
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
    finally:
        upstream_w.close()
        client_w.close()


async def serve(port: int, socket_path: str, host: str = "127.0.0.1") -> None:
    server = await asyncio.start_server(lambda r, w: _relay(socket_path, r, w), host, port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1 to listen on")
    parser.add_argument("--socket", required=True, help="unix socket to relay each connection to")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.socket))


if __name__ == "__main__":
    main()
