"""The wheel ships the catalog, and an installed agentbake finds it without a checkout."""

from __future__ import annotations

import ast
import email
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from agentbake.buildkit.catalog import builtin_root

# Imported only by commands that need an extra or a maintainer tool, each behind a lazy import.
OPTIONAL_IMPORTS = {"e2b": "e2b", "huggingface_hub": "hf", "uv": "lock (a maintainer command; uv is a dev tool)"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(builtin_root())],
        check=True,
    )
    (built,) = out.glob("agentbake-*.whl")
    return built


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module.split(".")[0]]
    return []


def _third_party_imports(tree: ast.AST) -> set[str]:
    """Top-level names of what a module imports, leaving out the standard library, agentbake itself, and
    every import of a function that imports an optional package (it runs only with that extra)."""
    optional_functions = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(name in OPTIONAL_IMPORTS for child in ast.walk(node) for name in _imported(child))
    ]
    skipped = {id(child) for function in optional_functions for child in ast.walk(function)}
    return {
        name
        for node in ast.walk(tree)
        if id(node) not in skipped
        for name in _imported(node)
        if name not in sys.stdlib_module_names and name != "agentbake"
    }


def test_a_plain_install_has_what_the_package_imports(wheel: Path) -> None:
    """`pip install agentbake` alone runs the gateway, the scripted model and the runner on the host."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = email.message_from_bytes(archive.read(name)).get_all("Requires-Dist")
    base = {_requirement_name(r) for r in requires if "extra ==" not in r}
    distributions = packages_distributions()
    missing = {}
    for source in (builtin_root() / "agentbake").rglob("*.py"):
        for module in _third_party_imports(ast.parse(source.read_text())):
            dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
            if not dists & base:
                missing[module] = str(source.relative_to(builtin_root()))
    assert missing == {}, f"imported but not a base dependency: {missing}"
    assert {"uvicorn", "uvloop", "httptools", "orjson", "pydantic"} <= base


def test_the_image_locks_still_match_the_gateway_extra() -> None:
    """Base dependencies may grow; the images' lean venv (the `gateway` extra, hashed by every lock) must not move."""
    pyproject = tomllib.loads((builtin_root() / "pyproject.toml").read_text())
    extra = sorted(pyproject["project"]["optional-dependencies"]["gateway"])
    for lock in sorted((builtin_root() / "images").glob("*/lock.json")):
        assert json.loads(lock.read_text())["inputs"]["python"]["requirements"] == extra, lock


def test_wheel_ships_the_catalog_and_uses_it(wheel: Path, tmp_path: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for image in ("claude-code", "opencode", "pi"):
        assert f"agentbake/_catalog/images/{image}/image.toml" in names
        assert f"agentbake/_catalog/images/{image}/lock.json" in names
    assert "agentbake/_catalog/templates/Dockerfile.j2" in names
    assert "agentbake/_catalog/templates/partials/agent-native.j2" in names

    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    probe = "from agentbake.buildkit import Catalog; c = Catalog.discover(); print(c.templates_dir, *c.names())"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [str(target / "agentbake/_catalog/templates"), "claude-code", "opencode", "pi"]
