"""Hugging Face: the boot check on real images, and a Docker Space through the real huggingface_hub SDK."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.render import Rendered, render
from agentbake.errors import PublishError
from agentbake.publish.hf import check_boot, publish_space
from tests.publish.fake_hub import FakeHub, FakeHubServer
from tests.publish.registry_service import cached_build


@pytest.mark.docker
def test_a_catalog_image_can_boot_in_a_hugging_face_sandbox(engine: docker.DockerClient, built_images) -> None:
    check_boot(engine, built_images["opencode"].tag)


@pytest.mark.docker
def test_the_bare_debian_base_lacks_a_downloader(engine: docker.DockerClient) -> None:
    with pytest.raises(PublishError, match=r"lacks curl or wget; add them") as caught:
        check_boot(engine, "debian:bookworm-slim")
    assert "sha256sum" not in str(caught.value) and "/bin/sh" not in str(caught.value)


@pytest.mark.docker
def test_an_image_without_sha256sum_is_named_as_such(engine: docker.DockerClient) -> None:
    dockerfile = b"FROM debian:bookworm-slim\nRUN rm /usr/bin/sha256sum\n"
    image = cached_build(engine, "no-sha256sum", {"Dockerfile": dockerfile})
    with pytest.raises(PublishError, match=r"lacks curl or wget, sha256sum"):
        check_boot(engine, image)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHubServer() as state:
        monkeypatch.setenv("HF_ENDPOINT", state.url)
        monkeypatch.setenv("HF_TOKEN", "hf_test_token")
        yield state


@pytest.fixture(scope="module")
def rendered(catalog: Catalog) -> Rendered:
    return render(catalog.load("pi"), catalog.templates_dir)


def test_a_docker_space_is_created_with_the_dockerfile_and_context_then_updated(hub: FakeHub, rendered) -> None:
    assert publish_space(rendered, "abc123def456", "my-org/pi") == "hf.co/spaces/my-org/pi"
    created = hub.repos["my-org/pi"]
    assert (created["type"], created["sdk"]) == ("space", "docker")
    files = hub.files["my-org/pi"]
    assert files["Dockerfile"] == rendered.dockerfile.encode()
    assert set(rendered.context_files()) <= set(files)
    assert b"sdk: docker" in files["README.md"] and b"abc123def456" in files["README.md"]
    writes = [token for _, path, token in hub.tokens if path.endswith("/create") or "/commit/" in path]
    assert writes and all(token == "Bearer hf_test_token" for token in writes)

    publish_space(rendered, "fedcba654321", "my-org/pi")  # the Space exists: updated, not an error
    assert hub.commits == ["agentbake pi abc123def456", "agentbake pi fedcba654321"]


@pytest.mark.parametrize(
    ("call", "status", "message"),
    [
        ("POST /api/repos/create", 401, r"HTTP 401 \(check HF_TOKEN"),
        ("POST /api/spaces/my-org/pi/commit", 403, r"HTTP 403 \(check HF_TOKEN"),
        ("POST /api/spaces/my-org/pi/preupload", 400, r"Space my-org/pi: HTTP 400"),  # 5xx: the SDK retries for ~25 s
    ],
)
def test_hub_errors_name_the_space_and_status(hub: FakeHub, rendered, call: str, status: int, message: str) -> None:
    hub.fail[call] = status
    with pytest.raises(PublishError, match=message):
        publish_space(rendered, "abc123def456", "my-org/pi")


@pytest.mark.parametrize("bad", ["pi", "my-org/", "a/b/c"])
def test_a_space_name_must_be_namespace_slash_name(bad: str, rendered) -> None:
    with pytest.raises(PublishError, match="expected NAMESPACE/NAME"):
        publish_space(rendered, "abc123def456", bad)


@pytest.mark.docker
def test_an_image_without_a_shell_is_named_as_such_and_leaves_no_container(engine: docker.DockerClient) -> None:
    image = cached_build(engine, "no-shell", {"Dockerfile": b"FROM scratch\nCOPY marker /marker\n", "marker": b"x"})
    before = {c.id for c in engine.containers.list(all=True, filters={"ancestor": image})}
    with pytest.raises(PublishError, match=r"lacks /bin/sh, curl or wget, sha256sum"):
        check_boot(engine, image)
    assert {c.id for c in engine.containers.list(all=True, filters={"ancestor": image})} == before
