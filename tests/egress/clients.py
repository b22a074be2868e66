"""Real clients as a sandbox runs them: curl and urllib with the proxy variables, and a raw socket for what
well-behaved clients never send."""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass


def clean_env(**extra: str) -> dict[str, str]:
    """A child's environment with none of this machine's proxy, pip or npm settings."""
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**keep, **extra}


def curl(proxy: str, *args: str) -> subprocess.CompletedProcess[str]:
    """curl through `proxy`; prints the status and the cache header on the last line."""
    return subprocess.run(
        ["curl", "-sS", "--max-time", "20", "-x", proxy, "-D", "-", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=30,
    )


@dataclass
class Got:
    status: int
    headers: dict[str, str]
    body: bytes


def fetch(proxy: str, url: str, headers: dict[str, str] | None = None, method: str = "GET") -> Got:
    """urllib through `proxy` set as http_proxy/https_proxy (as the sandbox's variables do)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with opener.open(request, timeout=20) as answer:
            return Got(answer.status, dict(answer.headers.items()), answer.read())
    except urllib.error.HTTPError as error:
        return Got(error.code, dict(error.headers.items()), error.read())


def raw(port: int, data: bytes, *, timeout: float = 10) -> bytes:
    """Send `data` to the relay on loopback and read until the proxy closes (or `timeout`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        chunks = []
        try:
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)
