"""Connecting to the Docker engine, with errors that say what to do."""

from __future__ import annotations

import os
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound
from docker.models.images import Image

from agentbake.errors import EngineError

_API_VERSIONS: dict[str, str] = {}
"""The API version each engine address (DOCKER_HOST, or a backend's base_url; "" for the default socket)
negotiated in this process. The first client asks the engine (a /version request, ~10-20 ms); the next ones,
the runner's and its backend's after the CLI's, reuse it and skip that request."""


def connect(timeout: int = 600) -> docker.DockerClient:
    """A client for the engine DOCKER_HOST names (default: the local socket), checked by one request."""
    address = os.environ.get("DOCKER_HOST") or ""
    known = _API_VERSIONS.get(address)
    try:
        client = docker.from_env(timeout=timeout, version=known)  # None: asked of the engine
        if known is not None:
            client.ping()
    except DockerException as exc:
        raise EngineError(
            f"no Docker engine answers ({exc}); start one (`dockerd`, or Docker Desktop) or set DOCKER_HOST, "
            "then check with `agentbake doctor`"
        ) from None
    _API_VERSIONS[address] = client.api.api_version
    return client


def api_client(base_url: str | None = None, **settings: Any) -> docker.APIClient:
    """A low-level client for `base_url` (default: DOCKER_HOST's engine) with `settings` (timeout, pool size),
    speaking the API version this process negotiated with that engine, else the one it answers. Unchecked
    beyond that: DockerException when no engine answers."""
    where = {"base_url": base_url} if base_url else docker.utils.kwargs_from_env()
    address = where.get("base_url") or ""
    client = docker.APIClient(version=_API_VERSIONS.get(address), **where, **settings)
    _API_VERSIONS[address] = client.api_version
    return client


def find_image(client: docker.DockerClient, ref: str) -> Image | None:
    """A local image, or None when the engine has no image by that reference."""
    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None


def image_id(client: docker.DockerClient, ref: str) -> str | None:
    """The id of a local image, or None when the engine has no image by that reference."""
    image = find_image(client, ref)
    return None if image is None else image.id


def ensure_base(client: docker.DockerClient, ref: str, suite: str) -> str:
    """The base image's id; pulled when absent, else an error naming the offline way to build it."""
    found = image_id(client, ref)
    if found is not None:
        return found
    try:
        return client.images.pull(ref).id
    except DockerException as exc:
        raise EngineError(
            f"base image {ref!r} is not on this engine and could not be pulled ({str(exc).splitlines()[0]}); "
            f"build it offline with `agentbake base debian --suite {suite} --tag {ref}`, "
            "or pass --base-image REF for an image you have"
        ) from None
