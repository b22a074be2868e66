"""agentbake.serve: real uvicorn servers on loopback TCP and unix sockets, real httpx clients."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from agentbake.errors import ServeError
from agentbake.serve import UDS_MODE, ConnectionLimits, serve_in_thread


async def hello_app(scope: dict, receive, send) -> None:
    """Answers every request with its path; completes lifespan events."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": scope["path"].encode()})


async def slow_app(scope: dict, receive, send) -> None:
    """hello_app, answering only after 1.5 s."""
    if scope["type"] == "http":
        await asyncio.sleep(1.5)
    await hello_app(scope, receive, send)


async def failing_startup_app(scope: dict, receive, send) -> None:
    await receive()
    await send({"type": "lifespan.startup.failed", "message": "no model loaded"})


def test_free_tcp_port_is_served_until_stopped() -> None:
    with serve_in_thread(hello_app) as served:
        assert served.uds is None and served.url.startswith("http://127.0.0.1:")
        port = int(served.url.rsplit(":", 1)[1])
        assert port > 0
        assert httpx.get(served.url + "/ping").text == "/ping"
    with pytest.raises(httpx.ConnectError):
        httpx.get(served.url + "/ping")


def test_unix_socket_is_world_connectable_and_removed_on_stop(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    with serve_in_thread(hello_app, uds=path) as served:
        assert served.uds == path and served.url == "http://localhost"
        assert stat.S_IMODE(path.stat().st_mode) == UDS_MODE == 0o666
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url=served.url) as client:
            assert client.get("/over-uds").text == "/over-uds"
    assert not path.exists()


def test_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # bound, never listening: what a killed server leaves behind
    with serve_in_thread(hello_app, uds=path), httpx.Client(transport=httpx.HTTPTransport(uds=str(path))) as client:
        assert client.get("http://localhost/x").text == "/x"


def test_addresses_in_use_or_not_sockets_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    with serve_in_thread(hello_app, uds=path), pytest.raises(ServeError, match="another server is listening"):
        serve_in_thread(hello_app, uds=path)
    plain = tmp_path / "notes.txt"
    plain.write_text("keep me")
    with pytest.raises(ServeError, match=r"notes\.txt: the path exists and is not a socket"):
        serve_in_thread(hello_app, uds=plain)
    assert plain.read_text() == "keep me"
    with serve_in_thread(hello_app) as served:
        port = int(served.url.rsplit(":", 1)[1])
        with pytest.raises(ServeError, match=f"cannot listen on 127.0.0.1:{port}"):
            serve_in_thread(hello_app, port=port)


def test_failed_startup_is_an_error_not_a_hang(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    with pytest.raises(ServeError, match="failed during startup"):
        serve_in_thread(failing_startup_app, uds=path, log_level="critical")
    assert not path.exists()


def test_blocking_serve_stops_on_sigterm_and_removes_its_socket(tmp_path: Path) -> None:
    path = tmp_path / "cli.sock"
    program = (
        "import sys; from pathlib import Path; from agentbake.serve import serve; "
        "from tests.test_serve import hello_app; serve(hello_app, uds=Path(sys.argv[1]))"
    )
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen([sys.executable, "-c", program, str(path)], cwd=root, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not path.exists():
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "server did not create its socket"
            time.sleep(0.02)
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path), retries=3)) as client:
            assert client.get("http://localhost/cli").text == "/cli"
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=20)
    # uvicorn re-raises the SIGTERM after a clean shutdown, so the parent sees how the process ended.
    assert returncode == -signal.SIGTERM and not path.exists()


@pytest.mark.docker
def test_a_capless_container_user_reaches_the_socket_through_a_bind_mount(tmp_path: Path, engine, built_images) -> None:
    folder = tmp_path / "sock"
    folder.mkdir(mode=0o755)  # the socket's folder must be traversable too: no capability bypasses its mode
    tmp_path.chmod(0o755)
    probe = (
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/agentbake/app.sock'); "
        "s.sendall(b'GET /from-container HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'); "
        "print(b''.join(iter(lambda: s.recv(4096), b'')).decode())"
    )
    with serve_in_thread(hello_app, uds=folder / "app.sock"):
        for user in ("agent", "root"):
            output = engine.containers.run(
                built_images["claude-code"].tag,
                ["python3", "-c", probe],
                entrypoint=[],
                user=user,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                network_mode="none",
                volumes={str(folder): {"bind": "/run/agentbake", "mode": "rw"}},
                remove=True,
            )
            assert output.startswith(b"HTTP/1.1 200 OK") and b"/from-container" in output, (user, output)


def test_a_new_server_never_lowers_a_running_servers_log_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers in threads share uvicorn's loggers: starting one must not put them at INFO even briefly, or a
    server starting meanwhile prints `Started server process` (seen once in bench runs)."""
    uvicorn_error = logging.getLogger("uvicorn.error")
    with serve_in_thread(hello_app):
        levels: list[int] = []
        set_level = uvicorn_error.setLevel

        def recording(level: int) -> None:
            levels.append(level)
            set_level(level)

        monkeypatch.setattr(uvicorn_error, "setLevel", recording)
        with serve_in_thread(hello_app) as second:
            assert httpx.get(second.url + "/").status_code == 200
    assert levels and set(levels) == {logging.WARNING}


def _raw_connection(path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(20)  # a test that would hang fails instead
    client.connect(str(path))
    return client


def _closed_by_server(client: socket.socket) -> bool:
    """Whether the server closed the connection (recv sees the end, or a reset) before the socket timeout."""
    try:
        return client.recv(65536) == b""
    except ConnectionResetError:
        return True


GET = b"GET /asked HTTP/1.1\r\nHost: x\r\n\r\n"


def test_connections_past_max_connections_are_closed_as_they_arrive(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    limits = ConnectionLimits(max_connections=4, idle_timeout_s=30)
    with serve_in_thread(hello_app, uds=path, limits=limits, log_level="critical"):
        held = [_raw_connection(path) for _ in range(4)]
        extra = _raw_connection(path)
        assert _closed_by_server(extra)
        held[0].sendall(GET)  # the held connections still serve
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200 OK")
        held.pop().close()
        time.sleep(0.2)  # the server sees the close
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path))) as client:
            assert client.get("http://localhost/again").text == "/again"
        for client in [*held, extra]:
            client.close()


def test_idle_and_trickling_connections_are_closed_but_a_slow_answer_is_not(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    limits = ConnectionLimits(max_connections=16, idle_timeout_s=0.5)
    with serve_in_thread(slow_app, uds=path, limits=limits, log_level="critical"):
        idle = _raw_connection(path)
        trickle = _raw_connection(path)
        closed = threading.Event()

        def send_a_byte_at_a_time() -> None:
            for byte in GET[:-2]:  # never the blank line that ends the head
                try:
                    trickle.sendall(bytes([byte]))
                except OSError:
                    closed.set()
                    return
                time.sleep(0.05)

        sender = threading.Thread(target=send_a_byte_at_a_time)
        sender.start()
        assert _closed_by_server(idle)
        sender.join()
        assert closed.is_set() or _closed_by_server(trickle)
        # The whole request arrived in time: the answer may take longer than the idle timeout.
        answered = _raw_connection(path)
        answered.sendall(GET)
        assert answered.recv(65536).startswith(b"HTTP/1.1 200 OK")
        assert _closed_by_server(answered)  # then idle again: closed
        for client in (idle, trickle, answered):
            client.close()


def test_a_request_head_past_max_head_bytes_is_a_400(tmp_path: Path) -> None:
    path = tmp_path / "app.sock"
    limits = ConnectionLimits(max_connections=4, idle_timeout_s=30, max_head_bytes=4096)
    with serve_in_thread(hello_app, uds=path, limits=limits, log_level="critical"):
        client = _raw_connection(path)
        client.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * 8192 + b"\r\n\r\n")
        answer = b"".join(iter(lambda: client.recv(65536), b""))
        assert answer.startswith(b"HTTP/1.1 400 Bad Request") and b"request head larger than 4096 bytes" in answer
        client.close()
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path))) as http:
            assert http.get("http://localhost/small", headers={"x-filler": "a" * 2000}).text == "/small"
