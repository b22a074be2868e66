"""Pushing to a real registry (Debian's docker-registry on 127.0.0.1): round trip, skip, and each failure."""

from __future__ import annotations

import base64
import json
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import docker
import pytest

from agentbake.buildkit.build import context_tar
from agentbake.buildkit.builders import run_build
from agentbake.errors import PublishError
from agentbake.publish.registry import (
    PASSWORD_ENV,
    USERNAME_ENV,
    Credentials,
    Distribution,
    RemoteImage,
    Repository,
    push_image,
    registry_credentials,
    with_retries,
)
from tests.publish.registry_service import STORAGE, TEST_USER, RunningRegistry, run_registry

pytestmark = pytest.mark.docker


@pytest.fixture
def unique_image(engine: docker.DockerClient) -> docker.models.images.Image:
    """An image no registry has seen: a layer holding a fresh uuid on top of the Debian base."""
    marker = uuid.uuid4().hex
    dockerfile = f"FROM debian:bookworm-slim\nRUN echo {marker} > /etc/agentbake-marker\n"
    tag = f"agentbake-test/unique:{marker[:12]}"
    image = engine.images.get(run_build(engine, context_tar({"Dockerfile": dockerfile.encode()}), tag))
    yield image
    if _exists(engine, image.id):
        engine.images.remove(image.id, force=True)


def _exists(engine: docker.DockerClient, ref: str) -> bool:
    try:
        engine.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def _distribution(registry: RunningRegistry, path: str, credentials: Credentials | None = None) -> Distribution:
    return Distribution(Repository.parse(registry.repository(path)), credentials)


def test_round_trip_pulls_back_the_same_digest_and_a_second_push_is_skipped(
    engine: docker.DockerClient, registry: RunningRegistry, unique_image
) -> None:
    dist = _distribution(registry, f"rt-{uuid.uuid4().hex[:8]}/image")
    pushed = push_image(engine, unique_image, dist, "abc123def456", dist.manifest("abc123def456"))
    assert pushed.action == "pushed" and pushed.digest.startswith("sha256:")
    assert dist.manifest("abc123def456").digest == pushed.digest
    assert dist.manifest("latest").digest == pushed.digest
    # The engine keeps no registry-named tag behind.
    assert not any(t.startswith(registry.address) for t in engine.images.get(unique_image.id).tags)

    again = push_image(engine, unique_image, dist, "abc123def456", dist.manifest("abc123def456"))
    assert (again.action, again.digest) == ("skipped", pushed.digest)

    original_id = unique_image.id
    engine.images.remove(original_id, force=True)
    pulled = engine.images.pull(dist.repository.reference, tag="abc123def456")
    try:
        assert pulled.id == original_id
        assert f"{dist.repository.reference}@{pushed.digest}" in pulled.attrs["RepoDigests"]
    finally:
        engine.images.remove(pulled.id, force=True)


def test_a_registry_that_is_down_is_a_clear_error_after_bounded_retries() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist = Distribution(Repository.parse(f"127.0.0.1:{port}/agentbake/x"), None)
    with pytest.raises(PublishError, match=rf"127\.0\.0\.1:{port} does not answer \(connection refused\).*3 attempts"):
        with_retries(lambda: dist.manifest("t"), what="checking t", retries=2, delay=0.01)


def test_401_names_the_user_and_the_fix_and_leaves_no_latest(
    engine: docker.DockerClient, registry_image: str, tiny_image: str
) -> None:
    image = engine.images.get(tiny_image)
    with run_registry(registry_image, password="right-password") as secured:
        wrong = _distribution(secured, "auth/image", Credentials(TEST_USER, "wrong-password"))
        with pytest.raises(PublishError, match=rf"refused auth/image as '{TEST_USER}' \(HTTP 401.*docker login"):
            wrong.manifest("t1")
        anonymous = _distribution(secured, "auth/image")
        with pytest.raises(PublishError, match="without credentials"):
            anonymous.manifest("t1")
        # The engine's own push with bad credentials fails through the streamed error, not silently.
        with pytest.raises(PublishError, match=r"push .*auth/image:t1 failed"):
            push_image(engine, image, wrong, "t1", None, retries=0)
        right = _distribution(secured, "auth/image", Credentials(TEST_USER, "right-password"))
        assert right.manifest("t1") is None and right.manifest("latest") is None
        assert push_image(engine, image, right, "t1", None).action == "pushed"
        assert right.manifest("latest") is not None


def test_a_registry_that_fills_up_mid_push_fails_the_push_and_leaves_no_latest(
    engine: docker.DockerClient, registry_image: str, tiny_image: str
) -> None:
    # The layers are in before the storage fills: the engine retries a failed layer upload for ~50 s, while the
    # manifest, the push's last write, fails at once.
    image = engine.images.get(tiny_image)
    with run_registry(registry_image, storage_size="1m") as tiny:
        dist = _distribution(tiny, "full/image")
        push_image(engine, image, dist, "t0", None, latest=False)
        exit_code, output = tiny.container.exec(["dd", "if=/dev/zero", f"of={STORAGE}/filler", "bs=4k"])
        assert exit_code != 0 and b"No space left on device" in output, output
        with pytest.raises(PublishError, match=r"push .*full/image:t1 failed: .*500"):
            push_image(engine, image, dist, "t1", None, retries=0)
        assert dist.manifest("t1") is None
        assert dist.manifest("latest") is None
        assert dist.manifest("t0") is not None


def test_credentials_come_from_the_environment_both_or_neither(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USERNAME_ENV, "me")
    monkeypatch.setenv(PASSWORD_ENV, "secret")
    found = registry_credentials("ghcr.io")
    assert found == Credentials("me", "secret") and "secret" not in repr(found)
    monkeypatch.delenv(PASSWORD_ENV)
    with pytest.raises(PublishError, match=f"{PASSWORD_ENV} is not set"):
        registry_credentials("ghcr.io")


def test_credentials_come_from_the_docker_config(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"auths": {"registry.example:5000": {"auth": base64.b64encode(b"cfg-user:cfg-pw").decode()}}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv(USERNAME_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    assert registry_credentials("registry.example:5000") == Credentials("cfg-user", "cfg-pw")
    assert registry_credentials("other.example") is None


@pytest.mark.parametrize(
    ("reference", "host", "name", "api"),
    [
        ("ghcr.io/org/agentbake", "ghcr.io", "org/agentbake", "https://ghcr.io"),
        ("127.0.0.1:5000/agentbake", "127.0.0.1:5000", "agentbake", "http://127.0.0.1:5000"),
        ("localhost:5000/a/b", "localhost:5000", "a/b", "http://localhost:5000"),
        ("someone/agentbake", "docker.io", "someone/agentbake", "https://registry-1.docker.io"),
    ],
)
def test_repository_parse(reference: str, host: str, name: str, api: str) -> None:
    repo = Repository.parse(reference)
    assert (repo.host, repo.name, repo.api_base) == (host, name, api)
    assert repo.child("pi").reference == f"{reference}/pi"


@pytest.mark.parametrize("bad", ["", "ghcr.io/org/", "ghcr.io/org@sha256:abc", " ghcr.io/x"])
def test_repository_parse_rejects_what_is_no_repository_prefix(bad: str) -> None:
    with pytest.raises(PublishError, match="expected a repository prefix"):
        Repository.parse(bad)


class _TokenAuthRegistry(BaseHTTPRequestHandler):
    """GHCR's and Docker Hub's scheme, which Debian's registry cannot serve without a token server:
    401 with a Bearer challenge, a token service taking basic auth, then the manifest for the bearer token."""

    seen: ClassVar[list[tuple[str, str]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.seen.append((self.path, auth))
        port = self.server.server_address[1]
        if self.path.startswith("/token"):
            ok = (
                auth == "Basic " + base64.b64encode(b"bot:pat").decode()
                and "scope=repository%3Aorg%2Fimg%3Apull" in self.path
            )
            return self._reply(200 if ok else 401, {"token": "tok-123"} if ok else {})
        if auth != "Bearer tok-123":
            challenge = f'Bearer realm="http://127.0.0.1:{port}/token",service="fake",scope="repository:org/img:pull"'
            return self._reply(401, {}, {"WWW-Authenticate": challenge})
        body = {"schemaVersion": 2, "config": {"digest": "sha256:" + "c" * 64}}
        return self._reply(200, body, {"Docker-Content-Digest": "sha256:" + "d" * 64})

    def _reply(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_bearer_token_auth_as_ghcr_does_it() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenAuthRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        repo = Repository.parse(f"127.0.0.1:{server.server_address[1]}/org/img")
        found = Distribution(repo, Credentials("bot", "pat")).manifest("t1")
        assert found == RemoteImage(digest="sha256:" + "d" * 64, config_digest="sha256:" + "c" * 64)
        assert _TokenAuthRegistry.seen[-1] == ("/v2/org/img/manifests/t1", "Bearer tok-123")
        with pytest.raises(PublishError, match="refused org/img as 'bot'"):
            Distribution(repo, Credentials("bot", "wrong")).manifest("t1")
    finally:
        server.shutdown()
        server.server_close()
