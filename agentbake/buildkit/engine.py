"""Connecting to the Docker engine, with errors that say what to do."""

from __future__ import annotations

import docker
from docker.errors import DockerException, ImageNotFound
from docker.models.images import Image

from agentbake.errors import EngineError


def connect(timeout: int = 600) -> docker.DockerClient:
    """A client for the engine named by DOCKER_HOST (default: the local socket), checked with a ping."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise EngineError(
            f"no Docker engine answers ({exc}); start one (`dockerd`, or Docker Desktop) or set DOCKER_HOST, "
            "then check with `agentbake doctor`"
        ) from None
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
