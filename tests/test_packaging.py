"""The release files: the sdist holds what the wheel is built from and both pass `twine check --strict`; the
wheel ships the catalog, the example tasks and the guides, and agentbake installed from it in a fresh venv, run
outside the checkout, finds its locks current, renders and builds to the checkout's content tags, runs a task on
the real engine and runs the release workflow's demo step."""

from __future__ import annotations

import ast
import email
import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import docker
import pytest
import yaml

import agentbake
from agentbake import shipped
from agentbake.buildkit.build import build
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.catalog import Catalog, builtin_root
from agentbake.buildkit.lock import gateway_requirements
from agentbake.buildkit.render import render
from tests.conftest import outside, plan_default

# Imported only by commands that need an extra or a maintainer tool, each behind a lazy import.
OPTIONAL_IMPORTS = {
    "e2b": "e2b",
    "huggingface_hub": "hf",
    "uv": "lock (a maintainer command; uv is a dev tool)",
    "transformers": "trl",
    "trl": "trl",
    "torch": "trl",
    "ray": "ray",
}
# What the wheel is built from: the project's metadata files, the package, and what force-include ships.
WHEEL_SOURCES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "NOTICE",
    "agentbake",
    "images",
    "templates",
    "examples",
    "docs",
)


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
    extra = gateway_requirements()  # pyproject's, written one canonical way
    for lock in sorted((builtin_root() / "images").glob("*/lock.json")):
        assert json.loads(lock.read_text())["inputs"]["python"]["requirements"] == extra, lock


def test_wheel_is_typed_licensed_and_versioned_from_the_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    dist_info = name.removesuffix("METADATA")
    assert {"agentbake/py.typed", f"{dist_info}licenses/LICENSE", f"{dist_info}licenses/NOTICE"} <= names
    assert metadata["Version"] == agentbake.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert {url.split(",")[0] for url in metadata.get_all("Project-URL")} == {
        "Homepage",
        "Documentation",
        "Changelog",
        "Issues",
    }


def test_wheel_ships_the_catalog_and_uses_it(wheel: Path, tmp_path: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for image in ("claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"):
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
    assert out == [
        str(target / "agentbake/_catalog/templates"),
        "claude-code",
        "codex",
        "gemini-cli",
        "mini-swe-agent",
        "opencode",
        "pi",
        "qwen-code",
    ]


def test_installed_wheel_is_not_the_checkout(venv: Path, tmp_path: Path) -> None:
    """The venv imports its own copy, and computes the same gateway requirements (the locks' inputs) from the
    wheel's metadata as the checkout does from pyproject.toml."""
    probe = (
        "import json, agentbake; from agentbake.buildkit.lock import gateway_requirements; "
        "print(json.dumps([agentbake.__file__, gateway_requirements()]))"
    )
    done = outside(venv, str(venv / "bin/python"), "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    module, requirements = json.loads(done.stdout)
    assert Path(module).is_relative_to(venv) and not Path(module).is_relative_to(builtin_root())
    assert requirements == gateway_requirements()


@pytest.mark.docker
def test_installed_wheel_lists_renders_and_runs_like_the_checkout(
    venv: Path, engine: docker.DockerClient, catalog: Catalog, tmp_path: Path
) -> None:
    """`agentbake images` finds every lock current and the checkout's content tags; `render` writes the
    checkout's bytes; `examples` copies the tasks out; `build` and `run --oracle` on one resolve the
    claude-code image by the same tag (already built, so nothing is rebuilt) and the run is rewarded."""
    tags = {spec.name: plan_default(engine, spec, catalog).tag for spec in catalog.load_all()}
    listed = outside(venv, "agentbake", "images", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["image"]: row for row in map(json.loads, listed.stdout.splitlines())}
    assert {name: (row["problem"], row["tag"]) for name, row in rows.items()} == {
        name: (None, tag) for name, tag in tags.items()
    }

    rendered = outside(venv, "agentbake", "render", "claude-code", "-o", str(tmp_path / "ctx"), cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    expected = render(catalog.load("claude-code"), catalog.templates_dir, ca_cert=detect_ca_bundle())
    written = {
        str(p.relative_to(tmp_path / "ctx")): p.read_bytes() for p in (tmp_path / "ctx").rglob("*") if p.is_file()
    }
    assert written == expected.context_files()

    copied = outside(venv, "agentbake", "examples", "tasks", "--json", cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    assert json.loads(copied.stdout) == {
        "dir": "tasks",
        "tasks": ["fix-failing-test", "fix-inventory", "multi-step-report", "summarize-logs", "write-file"],
    }

    build(engine, plan_default(engine, catalog.load("claude-code"), catalog))  # instant: the engine has the tag
    built = outside(venv, "agentbake", "build", "claude-code", "--json", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert (json.loads(built.stdout)["tag"], json.loads(built.stdout)["cached"]) == (tags["claude-code"], True)
    ran = outside(
        venv,
        "agentbake",
        "run",
        "claude-code",
        "--path",
        "tasks/write-file",
        "--oracle",
        "-o",
        "out",
        "--json",
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert (result["status"], result["reward"], result["image"]) == ("ok", 1.0, tags["claude-code"])
    assert "building" not in ran.stderr


def test_examples_refuses_to_overwrite(venv: Path, tmp_path: Path) -> None:
    (tmp_path / "tasks" / "write-file").mkdir(parents=True)
    done = outside(venv, "agentbake", "examples", "tasks", cwd=tmp_path)
    assert done.returncode == 1
    assert "tasks: already holds write-file; remove them or pass another folder" in done.stderr
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == ["write-file"]  # nothing copied


def test_installed_docs_list_and_print_every_guide(venv: Path, tmp_path: Path) -> None:
    """The installed `agentbake docs` lists what the checkout's does (the README, docs/ and every folder's
    README), from the venv's copies, and prints them."""
    listed = outside(venv, "agentbake", "docs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    guides = dict(line.split("\t") for line in listed.stdout.splitlines())
    assert set(guides) == set(shipped.guides())
    assert all(Path(path).is_relative_to(venv) for path in guides.values())
    for name, source in (("remote", "docs/remote.md"), ("trl", "agentbake/trl/README.md"), ("readme", "README.md")):
        shown = outside(venv, "agentbake", "docs", name, cwd=tmp_path)
        assert shown.stdout == (builtin_root() / source).read_text(), name
    unknown = outside(venv, "agentbake", "docs", "remtoe", cwd=tmp_path)
    known = ", ".join(sorted(guides))
    assert unknown.returncode == 1 and f"no guide named 'remtoe'; known guides: {known}" in unknown.stderr


def test_twine_check_passes_on_the_sdist_and_the_wheel(dist: Path) -> None:
    """What PyPI would refuse (metadata, the README as long description) fails here first."""
    files = sorted(map(str, dist.iterdir()))
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2


def test_the_sdist_holds_every_tracked_file_a_build_reads(dist: Path) -> None:
    """The wheel is built from the sdist: every file of git's tree that goes into the wheel is in it."""
    (sdist,) = dist.glob("agentbake-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--", *WHEEL_SOURCES], cwd=builtin_root(), capture_output=True, text=True, check=True
    ).stdout.split("\0")
    tracked = [name for name in tracked if name]
    assert len(tracked) > 100
    assert set(tracked) - names == set()


def test_a_stale_shipped_lock_says_what_a_pip_user_can_do(wheel: Path, tmp_path: Path) -> None:
    """A lock inside an installed wheel cannot be re-locked and committed: the message says to reinstall or
    to lock the image in a catalog of one's own (an `extends` of the shipped spec)."""
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    lock_path = target / "agentbake/_catalog/images/claude-code/lock.json"
    lock = json.loads(lock_path.read_text())
    lock["inputs"]["python"]["requirements"] = ["uvicorn>=0.1"]
    lock_path.write_text(json.dumps(lock))
    probe = (
        "from agentbake.buildkit import Catalog, read_lock\n"
        "try:\n    read_lock(Catalog.discover().load('claude-code'))\nexcept Exception as exc:\n    print(exc)"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    assert "stale lock, inputs.python.requirements" in out
    assert "the lock shipped with agentbake 0.1.0 does not match this installation" in out
    assert 'write images/claude-code/image.toml containing `extends = "claude-code"`' in out
    assert "pip install uv && agentbake lock claude-code" in out
    assert "commit" not in out


@pytest.mark.docker
def test_the_release_workflows_demo_runs_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    """release.yml builds and checks what the `dist` fixture does, then runs its demo step, run here as written
    against the venv the fixture installed the wheel into: the rollout is rewarded and its trace summarized."""
    workflow = yaml.safe_load((builtin_root() / ".github/workflows/release.yml").read_text())
    steps = {step.get("name"): step for step in workflow["jobs"]["dist"]["steps"]}
    assert "python -m build --outdir dist ." in steps["Build the sdist, then the wheel from it"]["run"]
    assert steps["Check both as PyPI would"]["run"] == "python -m twine check --strict dist/*"
    demo = steps["The demo, from the installed wheel"]
    assert demo["working-directory"] == "${{ runner.temp }}/demo"
    (tmp_path / "venv").symlink_to(venv)
    (tmp_path / "demo").mkdir()
    ran = outside(
        venv, "bash", "-euo", "pipefail", "-c", demo["run"], cwd=tmp_path / "demo", env={"RUNNER_TEMP": str(tmp_path)}
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "demo/out").glob("*/result.json")]
    assert (result["task"], result["status"], result["reward"], result["agent"]) == (
        "write-file",
        "ok",
        1.0,
        "claude-code",
    )
    assert "rollouts: 1\n" in ran.stdout and "errors: 0\n" in ran.stdout  # the trace summary


def resolve(requirements: list[str], tmp_path: Path) -> dict[str, str]:
    """The versions uv resolves `requirements` to for Linux x86-64 and this Python: resolution only, every wheel's
    metadata read from the index, nothing installed."""
    from uv import find_uv_bin

    listed = tmp_path / "requirements.in"
    listed.write_text("\n".join(requirements) + "\n")
    target = ["--python-version", f"{sys.version_info.major}.{sys.version_info.minor}"]
    compiled = subprocess.run(
        [find_uv_bin(), "pip", "compile", str(listed), *target, "--python-platform", "x86_64-manylinux_2_28", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stderr
    pins = (re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line) for line in compiled.stdout.splitlines())
    return {match[1].lower(): match[2] for match in pins if match}


def test_the_trl_extra_installs_beside_vllm_without_holding_it_back(tmp_path: Path) -> None:
    """`pip install 'agentbake[trl]' vllm` resolves, to the vLLM (and so the torch) it resolves to alone: the
    extra's ranges leave a trainer's stack alone, and its trl stays in the tested minor."""
    alone = resolve(["vllm"], tmp_path)
    together = resolve([f"agentbake[trl] @ {builtin_root().as_uri()}", "vllm"], tmp_path)
    assert (together["vllm"], together["torch"]) == (alone["vllm"], alone["torch"])
    assert together["trl"].startswith("1.16.")
    pinned = dict(
        line.split("==") for line in (builtin_root() / "constraints/ci.txt").read_text().split() if "==" in line
    )
    assert set(pinned) == {"torch", "transformers", "trl"}  # the exact pins CI installs live there, not in the extra
    extra = tomllib.loads((builtin_root() / "pyproject.toml").read_text())["project"]["optional-dependencies"]["trl"]
    assert not [requirement for requirement in extra if "==" in requirement]
