"""Shared fixtures: the Docker engine (a failure in CI when absent) and the built catalog images."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import docker
import pytest

from agentbake.buildkit.build import BuildPlan, BuildResult, build, plan
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.catalog import Catalog, builtin_root
from agentbake.buildkit.spec import ImageSpec
from agentbake.errors import EngineError

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
# The engine publishes test services' ports on this machine's loopback: reach them there even when the
# tests themselves run inside a container that runs its own engine (testcontainers would pick the gateway).
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")


VERSION_FLAG = {"mini-swe-agent": "--help"}
"""The flag that makes an agent's command print its version, where it is not --version (mini-swe-agent has none: its
banner names the version)."""


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog.discover(builtin_root() / "images")


@pytest.fixture(scope="session")
def engine() -> docker.DockerClient:
    """The Docker engine; in CI (CI=true) a missing engine fails the test instead of skipping it."""
    from agentbake.buildkit.engine import connect

    try:
        return connect()
    except EngineError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs a Docker engine: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def built_images(engine: docker.DockerClient, catalog: Catalog) -> dict[str, BuildResult]:
    """Every catalog image, built once per session (instant when the engine already has the tag)."""
    return {spec.name: build(engine, plan_default(engine, spec, catalog)) for spec in catalog.load_all()}


def plan_default(engine: docker.DockerClient, spec: ImageSpec, catalog: Catalog, **overrides: Any) -> BuildPlan:
    """Plan as `agentbake build` does: with the CA bundle the environment names (needed behind a proxy)."""
    return plan(engine, spec, catalog.templates_dir, **{"ca_cert": detect_ca_bundle(), **overrides})


@pytest.fixture
def user_catalog(tmp_path: Path) -> Path:
    """An empty user catalog folder; tests write specs into it."""
    folder = tmp_path / "catalog"
    folder.mkdir()
    return folder


def write_spec(folder: Path, name: str, text: str, *, lock_from: Path | None = None) -> Path:
    """Write <folder>/<name>/image.toml (and copy a lock.json beside it when given)."""
    image_dir = folder / name
    image_dir.mkdir(parents=True, exist_ok=True)
    (image_dir / "image.toml").write_text(text)
    if lock_from is not None:
        shutil.copy(lock_from, image_dir / "lock.json")
    return image_dir / "image.toml"
