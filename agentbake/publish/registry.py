"""Pushing an image to any OCI registry through the Docker engine, and asking the registry what it holds.

The engine pushes, since it has the layers and credentials. What the registry holds is asked over the distribution API,
so a skip is the registry's answer, not a guess.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import docker
import requests
from docker.auth import load_config, resolve_repository_name
from docker.errors import DockerException
from docker.models.images import Image

from agentbake.buildkit.engine import find_image
from agentbake.errors import PublishError

USERNAME_ENV = "AGENTBAKE_REGISTRY_USERNAME"
PASSWORD_ENV = "AGENTBAKE_REGISTRY_PASSWORD"
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    )
)
# Failures worth another attempt: the registry was unreachable or throttled us. A plain 500 is not
# among them: the engine has already retried each layer upload five times before it reports one.
_TRANSIENT = re.compile(
    r"connection refused|connection reset|i/o timeout|timeout|\bEOF\b|broken pipe|"
    r"\b50[234]\b|\b429\b|toomanyrequests|bad gateway|service unavailable|gateway timeout",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Credentials:
    """A registry login; the password never appears in a repr, a log or on a command line."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Repository:
    """Where an image goes: `host/path` as the engine names it, split for the distribution API."""

    reference: str
    host: str
    name: str

    @classmethod
    def parse(cls, reference: str) -> Repository:
        """`ghcr.io/org/agentbake/claude-code`, `127.0.0.1:5000/x`, or a Docker Hub `user/x`."""
        if not reference or reference != reference.strip() or "@" in reference or reference.endswith("/"):
            raise PublishError(
                f"--registry {reference!r}: expected a repository prefix like ghcr.io/OWNER/agentbake or "
                "127.0.0.1:5000/agentbake (no tag, no trailing slash)"
            )
        host, name = resolve_repository_name(reference)
        if host == DOCKER_HUB and "/" not in name:
            name = f"library/{name}"
        return cls(reference=reference, host=host, name=name)

    def child(self, image: str) -> Repository:
        """The repository of one catalog image under this prefix."""
        return Repository(reference=f"{self.reference}/{image}", host=self.host, name=f"{self.name}/{image}")

    @property
    def api_base(self) -> str:
        host = DOCKER_HUB_API if self.host == DOCKER_HUB else self.host
        return f"{'http' if _is_loopback(host) else 'https'}://{host}"


def _is_loopback(host: str) -> bool:
    """The engine talks plain HTTP to registries on loopback; so do we, and to nothing else."""
    name = host[1 : host.index("]")] if host.startswith("[") else host.rsplit(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def registry_credentials(host: str) -> Credentials | None:
    """AGENTBAKE_REGISTRY_USERNAME/PASSWORD when set, else the Docker config's login (`docker login HOST`)."""
    username, password = os.environ.get(USERNAME_ENV), os.environ.get(PASSWORD_ENV)
    if username or password:
        if not (username and password):
            missing = PASSWORD_ENV if username else USERNAME_ENV
            raise PublishError(f"{missing} is not set; set both {USERNAME_ENV} and {PASSWORD_ENV}, or neither")
        return Credentials(username, password)
    try:
        found = load_config().resolve_authconfig(host) or {}
    except DockerException as exc:
        raise PublishError(
            f"Docker config: cannot read the login for {host} ({exc}); run `docker login {host}`"
        ) from None
    user = found.get("username") or found.get("Username")
    secret = found.get("password") or found.get("Password")
    return Credentials(user, secret) if user and secret else None


@dataclass(frozen=True)
class RemoteImage:
    """What the registry holds under a tag: the manifest digest and the image config digest (= local image id)."""

    digest: str
    config_digest: str | None


def transient(message: str) -> bool:
    return bool(_TRANSIENT.search(message))


def with_retries(action: Callable[[], Any], *, what: str, retries: int, delay: float) -> Any:
    """Run `action`, again after a back-off when it fails transiently, at most `retries` more times."""
    for attempt in range(retries + 1):
        try:
            return action()
        except PublishError as exc:
            if attempt == retries or not transient(str(exc)):
                if attempt:
                    raise PublishError(f"{exc} (after {attempt + 1} attempts at {what})") from None
                raise
        time.sleep(delay * 2**attempt)
    raise AssertionError("unreachable")


class Distribution:
    """The registry's own API (OCI distribution): which manifest a tag names. Basic or bearer-token auth."""

    def __init__(self, repository: Repository, credentials: Credentials | None, *, timeout: float = 30) -> None:
        self.repository, self.credentials, self.timeout = repository, credentials, timeout
        self.session = requests.Session()
        self.session.trust_env = False  # no proxy between us and a loopback registry
        self._authorization: str | None = None

    def manifest(self, tag: str) -> RemoteImage | None:
        """The image under `tag`, or None when the registry has no such tag (or no such repository)."""
        url = f"{self.repository.api_base}/v2/{self.repository.name}/manifests/{tag}"
        response = self._get(url, headers={"Accept": MANIFEST_TYPES})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise PublishError(f"registry {self.repository.host}: GET manifest {tag} answered {_status(response)}")
        digest = response.headers.get("Docker-Content-Digest", "")
        try:
            body = response.json()
        except ValueError:
            raise PublishError(f"registry {self.repository.host}: manifest {tag} is not JSON") from None
        config = body.get("config") if isinstance(body, dict) else None
        return RemoteImage(digest=digest, config_digest=config.get("digest") if isinstance(config, dict) else None)

    def _get(self, url: str, headers: dict[str, str]) -> requests.Response:
        response = self._send(url, headers)
        if response.status_code == 401:
            self._authorization = self._authorize(response.headers.get("WWW-Authenticate", ""))
            response = self._send(url, headers)
        if response.status_code in (401, 403):
            who = f"as {self.credentials.username!r}" if self.credentials else "without credentials"
            raise PublishError(
                f"registry {self.repository.host} refused {self.repository.name} {who} ({_status(response)}); "
                f"log in with `docker login {self.repository.host}` or set {USERNAME_ENV} and {PASSWORD_ENV}"
            )
        return response

    def _send(self, url: str, headers: dict[str, str]) -> requests.Response:
        if self._authorization:
            headers = {**headers, "Authorization": self._authorization}
        try:
            response = self.session.get(url, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise PublishError(f"registry {self.repository.host} does not answer ({_reason(exc)})") from None
        if response.status_code in (429, 502, 503, 504):
            raise PublishError(f"registry {self.repository.host}: {_status(response)}")
        return response

    def _authorize(self, challenge: str) -> str | None:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.credentials is None:
                return None
            pair = f"{self.credentials.username}:{self.credentials.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        if scheme.lower() != "bearer":
            return None
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        query = {"service": fields.get("service", ""), "scope": f"repository:{self.repository.name}:pull"}
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        try:
            response = self.session.get(fields.get("realm", ""), params=query, auth=auth, timeout=self.timeout)
        except requests.RequestException as exc:
            raise PublishError(
                f"registry {self.repository.host}: token service does not answer ({_reason(exc)})"
            ) from None
        if response.status_code != 200:
            return None
        token = response.json().get("token") or response.json().get("access_token")
        return f"Bearer {token}" if token else None


def _status(response: requests.Response) -> str:
    return f"HTTP {response.status_code} {response.reason}"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Connection refused", "timed out", "Name or service not known", "Connection reset"):
        if marker in text:
            return marker.lower()
    return text.splitlines()[0][:200]


def engine_push(
    client: docker.DockerClient,
    repository: str,
    tag: str,
    credentials: Credentials | None,
    log: Callable[[str], None] = lambda line: None,
) -> str:
    """Push one tag and return the manifest digest; every streamed error entry becomes a PublishError.

    docker-py's push never raises on a failed push: the failure is an `{"error": ...}` entry in the stream."""
    auth = {"username": credentials.username, "password": credentials.password} if credentials else None
    digest, errors = None, []
    try:
        entries: Iterator[dict[str, Any]] = client.api.push(repository, tag, stream=True, decode=True, auth_config=auth)
        for entry in entries:
            if "error" in entry or "errorDetail" in entry:
                errors.append(entry.get("error") or entry["errorDetail"].get("message", str(entry)))
            elif isinstance(entry.get("aux"), dict) and entry["aux"].get("Digest"):
                digest = entry["aux"]["Digest"]
            elif entry.get("status") and not entry.get("progressDetail"):
                log(f"{entry.get('id', tag)}: {entry['status']}" if entry.get("id") else entry["status"])
    except DockerException as exc:
        errors.append(str(exc))
    if errors:
        raise PublishError(f"push {repository}:{tag} failed: {'; '.join(errors)}")
    if digest is None:
        raise PublishError(f"push {repository}:{tag}: the engine reported no digest; the push did not complete")
    return digest


@dataclass(frozen=True)
class RegistryPush:
    """One image in one repository: its content-hash tag's reference and digest, and what was done."""

    reference: str
    digest: str
    action: str
    latest: bool


def push_image(
    client: docker.DockerClient,
    image: Image | None,
    distribution: Distribution,
    tag: str,
    remote: RemoteImage | None,
    *,
    latest: bool = True,
    retries: int = 3,
    retry_delay: float = 1.0,
    log: Callable[[str], None] = lambda line: None,
) -> RegistryPush:
    """Push `tag` unless the registry holds it with this image's config; then `latest`, only once `tag` is there.

    `image` may be None only when `remote` holds the tag: nothing local to compare, nothing to push."""
    repository, credentials = distribution.repository, distribution.credentials
    reference = f"{repository.reference}:{tag}"
    if remote is not None and (image is None or remote.config_digest == image.id):
        action, digest = "skipped", remote.digest
    elif image is None:
        raise PublishError(f"{reference}: not in the registry and no local image to push; build it first")
    else:
        digest = _push_tag(client, image, repository, tag, credentials, retries, retry_delay, log)
        action = "pushed"
    if latest:
        current = with_retries(
            lambda: distribution.manifest("latest"), what="checking latest", retries=retries, delay=retry_delay
        )
        if current is None or current.digest != digest:
            if image is None:
                raise PublishError(f"{repository.reference}:latest: names another image and no local image to push")
            latest_digest = _push_tag(client, image, repository, "latest", credentials, retries, retry_delay, log)
            if latest_digest != digest:
                raise PublishError(f"{repository.reference}:latest pushed as {latest_digest}, expected {digest}")
    return RegistryPush(reference=reference, digest=digest, action=action, latest=latest)


def push_to_registry(
    client: docker.DockerClient,
    repository: Repository,
    tag: str,
    local_tag: str,
    local_image: Callable[[], Image],
    *,
    latest: bool,
    retries: int,
    retry_delay: float,
    log: Callable[[str], None] = lambda line: None,
) -> tuple[RegistryPush, Credentials | None]:
    """`tag` into `repository` with the credentials found for its host, which are returned for the next targets.

    `local_image` (which may build) is called only when the registry lacks `tag`; else a local `local_tag` is
    compared when the engine has one."""
    credentials = registry_credentials(repository.host)
    distribution = Distribution(repository, credentials)
    remote = with_retries(
        lambda: distribution.manifest(tag), what=f"checking {tag}", retries=retries, delay=retry_delay
    )
    image = find_image(client, local_tag) if remote is not None else local_image()
    pushed = push_image(
        client, image, distribution, tag, remote, latest=latest, retries=retries, retry_delay=retry_delay, log=log
    )
    return pushed, credentials


def _push_tag(
    client: docker.DockerClient,
    image: Image,
    repository: Repository,
    tag: str,
    credentials: Credentials | None,
    retries: int,
    retry_delay: float,
    log: Callable[[str], None],
) -> str:
    """Tag the local image under the registry's name, push it, untag it again (the engine keeps the image)."""
    image.tag(repository.reference, tag)
    try:
        return with_retries(
            lambda: engine_push(client, repository.reference, tag, credentials, log),
            what=f"pushing {tag}",
            retries=retries,
            delay=retry_delay,
        )
    finally:
        client.images.remove(f"{repository.reference}:{tag}", noprune=True)
