"""`agentbake base debian`: finds an existing base instead of rebuilding it."""

from __future__ import annotations

import docker
import pytest

from agentbake.buildkit.base import DEFAULT_MIRROR, MIRROR_LABEL, SUITE_LABEL, debian_base, slim
from agentbake.buildkit.build import context_tar
from agentbake.buildkit.catalog import builtin_root
from agentbake.buildkit.render import DPKG_SLIM


@pytest.mark.docker
def test_existing_base_is_kept(engine: docker.DockerClient) -> None:
    image = engine.images.get("debian:bookworm-slim")
    result = debian_base(engine, "bookworm")
    assert (result.tag, result.id, result.created) == ("debian:bookworm-slim", image.id, False)


@pytest.mark.docker
def test_offline_base_records_suite_and_mirror(engine: docker.DockerClient) -> None:
    labels = engine.images.get("debian:trixie-slim").labels or {}
    if SUITE_LABEL not in labels:
        pytest.skip("debian:trixie-slim came from a registry here, not from `agentbake base debian`")
    assert labels[SUITE_LABEL] == "trixie" and labels[MIRROR_LABEL] == DEFAULT_MIRROR


@pytest.mark.docker
def test_registry_image_without_labels_is_not_replaced(engine: docker.DockerClient) -> None:
    # An image under the tag that agentbake did not make (no suite label) stands as it is.
    tag = "agentbake-test/registry-debian:12"
    engine.api.import_image_from_data(context_tar({"etc/os-release": b"ID=debian\n"}), repository=tag)
    try:
        result = debian_base(engine, "bookworm", tag=tag)
        assert not result.created and result.id == engine.images.get(tag).id
    finally:
        engine.images.remove(tag)


def test_slim_removes_what_dpkg_excludes_and_keeps_licenses(tmp_path) -> None:
    files = [
        "usr/share/doc/git/README",
        "usr/share/doc/git/copyright",
        "usr/share/man/man1/git.1.gz",
        "usr/share/locale/de/LC_MESSAGES/git.mo",
        "usr/share/perl5/Error.pm",
    ]
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    config = (builtin_root() / "templates" / DPKG_SLIM).read_text()
    slim(tmp_path, config)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["etc/dpkg/dpkg.cfg.d/agentbake-slim", "usr/share/doc/git/copyright", "usr/share/perl5/Error.pm"]
    assert (tmp_path / "etc/dpkg/dpkg.cfg.d/agentbake-slim").read_text() == config
