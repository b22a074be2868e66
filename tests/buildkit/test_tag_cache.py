"""The remembered tag of a catalog name: plan()'s own tag, and a miss whenever one of its inputs changed or the
entry cannot be trusted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildPlan, plan
from agentbake.buildkit.catalog import Catalog, builtin_root
from agentbake.buildkit.tag_cache import cached_tag, entry_path, remember_tag, tag_key

pytestmark = pytest.mark.docker

NAME = "pi"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def own_catalog(tmp_path: Path) -> Catalog:
    """A copy of the built-in catalog and templates this test may change."""
    root = builtin_root()
    shutil.copytree(root / "images", tmp_path / "images")
    shutil.copytree(root / "templates", tmp_path / "templates")
    return Catalog(dirs=(tmp_path / "images",), templates_dir=tmp_path / "templates")


def planned(engine: docker.DockerClient, catalog: Catalog, ca_cert: Path | None = None) -> tuple[str | None, BuildPlan]:
    """The key and the plan of NAME, the plan remembered under the key."""
    key = tag_key(NAME, catalog, ca_cert=ca_cert)
    build_plan = plan(engine, catalog.load(NAME), catalog.templates_dir, ca_cert=ca_cert)
    remember_tag(key, build_plan)
    return key, build_plan


def test_the_remembered_tag_is_plans_tag(engine: docker.DockerClient, own_catalog: Catalog, tmp_path: Path) -> None:
    key = tag_key(NAME, own_catalog, ca_cert=None)
    assert key is not None and cached_tag(engine, NAME, key) is None  # nothing remembered yet
    _, build_plan = planned(engine, own_catalog)
    assert cached_tag(engine, NAME, key) == build_plan.tag
    assert tag_key(NAME, own_catalog, ca_cert=None) == key  # the same inputs, the same key
    entry = entry_path(key)
    assert entry is not None and entry.is_relative_to(tmp_path / "cache" / "agentbake" / "tags")
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no temporary file left beside it


@pytest.mark.parametrize(
    "change",
    ["template", "partial template", "spec", "lock", "the build kit's code"],
)
def test_a_changed_input_resolves_again(
    engine: docker.DockerClient, own_catalog: Catalog, change: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, before = planned(engine, own_catalog)
    image_dir = own_catalog.dirs[0] / NAME
    if change == "template":
        dockerfile = own_catalog.templates_dir / "Dockerfile.j2"
        dockerfile.write_text(dockerfile.read_text() + "# one more line\n")
    elif change == "partial template":
        labels = own_catalog.templates_dir / "partials" / "labels.j2"
        labels.write_text(labels.read_text() + "# one more line\n")
    elif change == "spec":
        spec = image_dir / "image.toml"
        spec.write_text(spec.read_text().replace('description = "', 'description = "Changed: ', 1))
    elif change == "lock":
        lock = image_dir / "lock.json"
        lock.write_text(json.dumps(json.loads(lock.read_text()), indent=1))  # the same lock, other bytes
    else:
        code = tmp_path / "buildkit"
        shutil.copytree(Path(__file__).parents[2] / "agentbake" / "buildkit", code)
        (code / "render.py").write_text((code / "render.py").read_text() + "\n# changed\n")
        monkeypatch.setattr("agentbake.buildkit.tag_cache._BUILDKIT_DIR", code)
    key_after = tag_key(NAME, own_catalog, ca_cert=None)
    assert key_after not in (None, key)
    assert cached_tag(engine, NAME, key_after) is None  # a miss: the caller plans again
    assert cached_tag(engine, NAME, key) == before.tag  # the old entry is only unreachable
    if change in ("template", "partial template", "spec"):  # a render that differs: another tag
        after = plan(engine, own_catalog.load(NAME), own_catalog.templates_dir)
        assert after.tag != before.tag


def test_the_ca_bundle_is_part_of_the_key(engine: docker.DockerClient, own_catalog: Catalog, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    without, plain = planned(engine, own_catalog)
    with_ca, with_ca_plan = planned(engine, own_catalog, ca_cert=ca)
    assert with_ca != without and with_ca_plan.tag != plain.tag
    assert cached_tag(engine, NAME, with_ca) == with_ca_plan.tag
    ca.write_text(PEM + PEM)
    assert tag_key(NAME, own_catalog, ca_cert=ca) not in (None, with_ca, without)
    assert tag_key(NAME, own_catalog, ca_cert=tmp_path / "missing.pem") is None  # unreadable: the render says so


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        "[]",
        '{"tag": "agentbake/pi:0123456789ab"}',
        '{"tag": 1, "base_image": "debian:bookworm-slim", "base_id": "sha256:x"}',
    ],
)
def test_a_corrupt_entry_is_ignored_and_replaced(engine: docker.DockerClient, own_catalog: Catalog, text: str) -> None:
    key, build_plan = planned(engine, own_catalog)
    entry = entry_path(key)
    assert entry is not None
    entry.write_text(text)
    assert cached_tag(engine, NAME, key) is None
    remember_tag(key, build_plan)
    assert cached_tag(engine, NAME, key) == build_plan.tag


@pytest.mark.parametrize(
    "field, value",
    [
        ("base_id", "sha256:" + "0" * 64),  # the base was rebuilt since
        ("base_image", "agentbake-test/no-such-base:1"),  # or is gone
        ("tag", "agentbake/claude-code:0123456789ab"),  # another image's tag
        ("tag", "evil/pi:latest"),  # not a content tag
    ],
)
def test_an_entry_that_does_not_fit_is_a_miss(
    engine: docker.DockerClient, own_catalog: Catalog, field: str, value: str
) -> None:
    key, _ = planned(engine, own_catalog)
    entry = entry_path(key)
    assert entry is not None
    entry.write_text(json.dumps({**json.loads(entry.read_text()), field: value}))
    assert cached_tag(engine, NAME, key) is None


def test_an_unwritable_cache_is_not_used(
    engine: docker.DockerClient, own_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # its "agentbake" folder cannot be made
    key, _ = planned(engine, own_catalog)  # no error
    assert cached_tag(engine, NAME, key) is None
