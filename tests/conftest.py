"""Shared fixtures: the Docker engine (a failure in CI when absent), the built catalog images, and agentbake's
sdist and wheel as the release workflow builds them, the wheel installed in a fresh venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, as .github/workflows/release.yml builds them: `python -m build` makes the sdist,
    then the wheel from it, so a file the sdist lacks is missing from the wheel too."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(builtin_root())], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


@pytest.fixture(scope="session")
def wheel(dist: Path) -> Path:
    (built,) = dist.glob("agentbake-*.whl")
    return built


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with only the wheel and its declared dependencies (no system site
    packages, so a dependency the wheel forgets to declare fails here). This interpreter's pip installs into
    it (`--python`), which skips bootstrapping a pip of its own."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    install = [sys.executable, "-m", "pip", "--python", str(root / "bin/python"), "install", "--quiet", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    return root


def outside(venv: Path, *argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A command of the venv, run from `cwd` as a user would: nothing of the checkout on the import path;
    `env` adds to the environment."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | (env or {})
    environ["PATH"] = f"{venv / 'bin'}:{environ.get('PATH', '')}"
    return subprocess.run(list(argv), cwd=cwd, env=environ, capture_output=True, text=True, timeout=600)
