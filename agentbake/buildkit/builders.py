"""The two builders of a Docker engine, driven through its API with one event stream.

- legacy: what docker-py's `build` drives (`Step N/M : ...` lines).
- buildkit: the engine's built-in BuildKit (`/build?version=2`), whose progress
  arrives as base64 protobuf `StatusResponse` messages, decoded here.
Both read the same tar context, so a rendered Dockerfile builds unchanged with either.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Literal

import docker
import requests
import urllib3

from agentbake.errors import BuildError

Builder = Literal["legacy", "buildkit"]
OUTPUT_TAIL_LINES = 25
_LEGACY_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_BUILDKIT_STEP = re.compile(r"^\[(?:\S+ )?\s*(\d+)/(\d+)\] (.*)$")


def seconds_since(started: float) -> float:
    """Seconds from the `time.monotonic()` reading `started` until now, to the millisecond (what results report)."""
    return round(time.monotonic() - started, 3)


class Progress:
    """Receives build events; the CLI draws them, the default ignores them."""

    def step(self, index: int, total: int, instruction: str) -> None: ...

    def output(self, line: str) -> None: ...


def run_build(
    client: docker.DockerClient,
    context: bytes,
    tag: str,
    *,
    builder: Builder = "legacy",
    no_cache: bool = False,
    labels: dict[str, str] | None = None,
    progress: Progress | None = None,
    timeout_s: float | None = None,
) -> str:
    """Build the tar `context` as `tag`; returns the image id or raises BuildError with the failing step.
    A build still running after `timeout_s` is cancelled: its request is closed, and the engine stops a
    build whose client went away."""
    progress = progress or Progress()
    started = time.monotonic()
    response = _post_build(client, context, tag, builder, no_cache, labels or {})
    timer = threading.Timer(timeout_s, _cancel, (client, response)) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    events = _legacy(client, response) if builder == "legacy" else _buildkit(response)
    step = "(before the first step)"
    tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
    built_id = None
    try:
        for kind, value in events:
            if kind == "step":
                index, total, text = value
                step = f"step {index}/{total}: {text}"
                tail.clear()
                progress.step(index, total, text)
            elif kind == "output":
                tail.append(value)
                progress.output(value)
            elif kind == "id":
                built_id = value
            elif kind == "error":
                raise BuildError(f"building {tag} failed at {step}: {value.strip()}", step=step, output_tail=list(tail))
    except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, AttributeError, ValueError):
        # A closed response fails its reader in one of these ways; only the timer closes it early.
        if timeout_s is None or time.monotonic() - started < timeout_s:
            raise
    finally:
        if timer is not None:
            timer.cancel()
        response.close()
    if built_id is None and timeout_s is not None and time.monotonic() - started >= timeout_s:
        raise BuildError(
            f"building {tag} ran past its {timeout_s:g} s build timeout at {step}; it was cancelled",
            step=step,
            output_tail=list(tail),
        )
    if built_id is None:
        raise BuildError(f"building {tag}: the engine reported no image id", step=step, output_tail=list(tail))
    return built_id


def _post_build(
    client: docker.DockerClient, context: bytes, tag: str, builder: Builder, no_cache: bool, labels: dict[str, str]
) -> requests.Response:
    """The engine's /build request, streaming (docker-py's `build` hides the response this needs to cancel)."""
    params = {
        "t": tag,
        "rm": "1",
        "forcerm": "1",
        "nocache": str(no_cache).lower(),
        "pull": "0",
        "labels": json.dumps(labels),
    }
    headers = {"Content-Type": "application/x-tar"}
    if builder == "buildkit":
        params["version"] = "2"
    else:
        client.api._set_auth_headers(headers)  # registry credentials for the FROM images it may pull
    response = client.api._post(
        client.api._url("/build"), params=params, data=context, headers=headers, stream=True, timeout=None
    )
    return response


Event = tuple[str, Any]


def _cancel(client: docker.DockerClient, response: requests.Response) -> None:
    """End a streaming request now. Shutting its socket down wakes the blocked reader, and the engine cancels the build
    of a client that left."""
    with contextlib.suppress(OSError, AttributeError, docker.errors.APIError):
        sock = client.api._get_raw_response_socket(response)
        getattr(sock, "_sock", sock).shutdown(socket.SHUT_RDWR)
    response.close()


def _legacy(client: docker.DockerClient, response: requests.Response) -> Iterator[Event]:
    if response.status_code != 200:
        yield "error", f"engine refused the build ({response.status_code}): {response.text.strip()}"
        return
    for event in client.api._stream_helper(response, decode=True):
        if "error" in event:
            yield "error", event["error"]
        if "ID" in (event.get("aux") or {}):
            yield "id", event["aux"]["ID"]
        for line in event.get("stream", "").splitlines():
            match = _LEGACY_STEP.match(line)
            if match:
                yield "step", (int(match[1]), int(match[2]), match[3])
            elif line.strip():
                yield "output", line


def _buildkit(response: requests.Response) -> Iterator[Event]:
    if response.status_code != 200:
        yield "error", f"engine refused the BuildKit build ({response.status_code}): {response.text.strip()}"
        return
    started: set[bytes] = set()
    for raw in response.iter_lines():
        event = json.loads(raw)
        if "error" in event:
            yield "error", event["error"]
        aux = event.get("aux")
        if event.get("id") == "moby.image.id":
            yield "id", aux["ID"]
        elif event.get("id") == "moby.buildkit.trace":
            yield from _trace_events(base64.b64decode(aux), started)


def _trace_events(message: bytes, started: set[bytes]) -> Iterator[Event]:
    """Steps and log lines of one BuildKit StatusResponse (vertexes = field 1, logs = field 3)."""
    for field, value in _fields(message):
        if field == 1:
            vertex = dict(_fields(value))
            digest, name = vertex.get(1, b""), vertex.get(3, b"").decode(errors="replace")
            match = _BUILDKIT_STEP.match(name)
            # BuildKit lists every vertex up front; a step begins when its `started` (field 5) is set.
            if match and 5 in vertex and digest not in started:
                started.add(digest)
                yield "step", (int(match[1]), int(match[2]), match[3])
        elif field == 3:
            for line in dict(_fields(value)).get(4, b"").decode(errors="replace").splitlines():
                if line.strip():
                    yield "output", line


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """Top-level fields of a protobuf message: varints as int, length-delimited ones as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            return
        yield field, value


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
