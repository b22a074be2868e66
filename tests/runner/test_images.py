"""The run's image on the local engine: a catalog name resolved to its content tag (remembered between runs in the
user's cache, checked on the engine every time), and its labels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.buildkit.catalog import Catalog, builtin_root
from agentbake.buildkit.labels import ImageLabels
from agentbake.errors import AgentbakeError
from agentbake.runner.images import image_labels, resolve_image
from tests.conftest import plan_default

pytestmark = pytest.mark.docker

RENDERING = ("jinja2", "agentbake.buildkit.render", "agentbake.buildkit.spec", "agentbake.buildkit.build")


def resolve_in_a_fresh_process(name: str, cwd: Path, cache: Path, *, build_missing: bool = True) -> tuple[str, list]:
    """`resolve_image(name)` in a new interpreter run in `cwd` with `cache` as XDG_CACHE_HOME: the tag, and
    which of the rendering modules it imported."""
    probe = (
        "import json, sys\nfrom agentbake.runner.images import resolve_image\n"
        f"tag = resolve_image({name!r}, build_missing={build_missing!r})\n"
        f"print(json.dumps([tag, sorted(m for m in {RENDERING!r} if m in sys.modules)]))"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=cwd, check=True)
    tag, imported = json.loads(done.stdout.splitlines()[-1])
    return tag, imported


def test_a_catalog_name_resolves_from_the_cache_without_rendering(
    built_images: dict[str, BuildResult], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first, imported = resolve_in_a_fresh_process("claude-code", tmp_path, cache)
    assert first == built_images["claude-code"].tag and "jinja2" in imported  # a miss: rendered
    again, imported = resolve_in_a_fresh_process("claude-code", tmp_path, cache)
    assert again == first and imported == []  # a hit: nothing of the render loaded


def test_a_remembered_tag_the_engine_lacks_is_still_checked(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], tmp_path: Path
) -> None:
    """A user catalog (./images) whose pi differs from the built one: its tag is not on the engine, from the
    render or from the cache alike (`build_missing=False` reports it unbuilt instead of building it)."""
    shutil.copytree(builtin_root() / "images" / "pi", tmp_path / "images" / "pi")
    spec = tmp_path / "images" / "pi" / "image.toml"
    spec.write_text(spec.read_text().replace('description = "', 'description = "Changed: ', 1))
    catalog = Catalog(dirs=(tmp_path / "images",), templates_dir=builtin_root() / "templates")
    expected = plan_default(engine, catalog.load("pi"), catalog).tag  # with the CA bundle, as resolve_image
    assert expected != built_images["pi"].tag
    cache = tmp_path / "cache"
    for _ in range(2):  # the miss, then the hit
        tag, _ = resolve_in_a_fresh_process("pi", tmp_path, cache, build_missing=False)
        assert tag == expected
        with pytest.raises(docker.errors.ImageNotFound):
            engine.images.get(tag)


def test_the_labels_are_the_engines(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tag = built_images["opencode"].tag
    expected = ImageLabels.from_labels(tag, engine.images.get(tag).labels)
    assert resolve_image("opencode") == tag
    assert image_labels(tag) == expected  # as resolve_image read them
    assert image_labels(tag) == expected  # asked of the engine
    assert resolve_image(tag) == tag  # a tag is taken as it is, once the engine has it
    assert image_labels(tag) == expected
    with pytest.raises(AgentbakeError, match="'agentbake-test/absent:1' is not on this engine"):
        resolve_image("agentbake-test/absent:1")
