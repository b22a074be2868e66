"""The content hash: equal inputs give equal tags, one changed byte anywhere gives a new one."""

from __future__ import annotations

import dataclasses

import pytest

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.digest import content_hash, image_tag
from agentbake.buildkit.render import Rendered, render

BASE = "sha256:" + "1" * 64


@pytest.fixture(scope="module")
def rendered(catalog: Catalog) -> Rendered:
    return render(catalog.load("pi"), catalog.templates_dir)


def test_equal_inputs_equal_hash(rendered: Rendered, catalog: Catalog) -> None:
    again = render(catalog.load("pi"), catalog.templates_dir)
    assert content_hash(rendered, BASE) == content_hash(again, BASE)


@pytest.mark.parametrize("path", ["Dockerfile", "requirements.txt", "agent/package-lock.json"])
def test_one_byte_changes_the_hash(rendered: Rendered, path: str) -> None:
    files = rendered.context_files()
    data = bytearray(files[path])
    data[len(data) // 2] ^= 1
    changed = dataclasses.replace(
        rendered,
        dockerfile=data.decode() if path == "Dockerfile" else rendered.dockerfile,
        files={**rendered.files, path: bytes(data)} if path != "Dockerfile" else rendered.files,
    )
    assert content_hash(changed, BASE) != content_hash(rendered, BASE)


def test_base_image_id_and_lock_are_inputs(rendered: Rendered) -> None:
    assert content_hash(rendered, BASE) != content_hash(rendered, "sha256:" + "2" * 64)
    other_lock = dataclasses.replace(rendered, lock={**rendered.lock, "image": "other"})
    assert content_hash(other_lock, BASE) != content_hash(rendered, BASE)


def test_paths_and_contents_cannot_be_shifted(rendered: Rendered) -> None:
    one = dataclasses.replace(rendered, files={"ab": b"c"})
    two = dataclasses.replace(rendered, files={"a": b"bc"})
    assert content_hash(one, BASE) != content_hash(two, BASE)


def test_tag_format() -> None:
    assert image_tag("pi", "abcdef0123456789") == "agentbake/pi:abcdef012345"
