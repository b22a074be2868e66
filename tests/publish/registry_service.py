"""The publish tests' real OCI registry (Debian's docker-registry) as a testcontainers service.

Its image is built from our Debian base once and cached under a tag hashing its inputs; bench/publish
uses the same service.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import HttpWaitStrategy

from agentbake.buildkit.build import context_tar
from agentbake.buildkit.builders import run_build
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.engine import find_image
from agentbake.buildkit.render import APT_CA_CONF

REGISTRY_DIR = Path(__file__).parent / "registry_image"
BASE = "debian:bookworm-slim"
TEST_USER = "publisher"
STORAGE = "/var/lib/docker-registry"
"""Where the registry keeps its blobs and manifests (config.yml's rootdirectory)."""
REGISTRY_UID = 100
"""The registry user's uid in the image (Debian's package creates it as the first system user): a sized storage
tmpfs is mounted owned by it, since the engine ignores a tmpfs mode and would leave it root's."""


def cached_build(client: docker.DockerClient, name: str, files: dict[str, bytes]) -> str:
    """Build `files` as agentbake-test/<name>:<hash of files + base id> unless the engine has that tag."""
    base_id = client.images.get(BASE).id
    digest = hashlib.sha256(base_id.encode())
    for path, data in sorted(files.items()):
        digest.update(hashlib.sha256(path.encode()).digest() + hashlib.sha256(data).digest())
    tag = f"agentbake-test/{name}:{digest.hexdigest()[:12]}"
    if find_image(client, tag) is None:
        run_build(client, context_tar(files), tag)
    return tag


def build_registry_image(client: docker.DockerClient) -> str:
    files = {path.name: path.read_bytes() for path in REGISTRY_DIR.iterdir() if path.is_file()}
    ca = detect_ca_bundle()
    # The same CA handling as the catalog's builds: apt trusts it for an https mirror behind a proxy.
    files.update({"ca/agentbake-extra.crt": ca.read_bytes(), "ca/apt.conf": APT_CA_CONF} if ca else {"ca/.none": b""})
    return cached_build(client, "registry", files)


@dataclass(frozen=True)
class RunningRegistry:
    container: DockerContainer
    address: str  # host:port on loopback

    def repository(self, path: str = "agentbake") -> str:
        return f"{self.address}/{path}"

    def stop(self) -> None:
        self.container.stop()


@contextmanager
def run_registry(
    image: str, *, password: str | None = None, storage_size: str | None = None
) -> Iterator[RunningRegistry]:
    """A registry container published on 127.0.0.1 only; basic auth with `password`; with `storage_size`, its
    storage is a tmpfs of that size."""
    container = DockerContainer(image)
    # A loopback-only host port (testcontainers' with_bind_ports would bind every address).
    container.ports["5000/tcp"] = ("127.0.0.1", None)
    wait = HttpWaitStrategy(5000, "/v2/").for_status_code(200)
    if password is not None:
        container.with_env("REGISTRY_TEST_USER", TEST_USER).with_env("REGISTRY_TEST_PASSWORD", password)
        wait = HttpWaitStrategy(5000, "/v2/").for_status_code(401)
    if storage_size is not None:
        # The value is handed to the engine as tmpfs mount options; the registry runs as a non-root user.
        container.with_tmpfs_mount(STORAGE, f"size={storage_size},uid={REGISTRY_UID}")
    container.waiting_for(wait.with_startup_timeout(30))
    with container:
        yield RunningRegistry(container, f"127.0.0.1:{container.get_exposed_port(5000)}")
