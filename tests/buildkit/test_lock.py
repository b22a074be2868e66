"""Locks: builds refuse missing or stale ones with the command that fixes it; resolution is exact."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentbake.buildkit.catalog import Catalog, builtin_root
from agentbake.buildkit.lock import LOCK_SCHEMA, lock_inputs, read_lock, requirements_txt, write_lock
from agentbake.errors import LockError
from tests.conftest import write_spec


def test_committed_locks_are_current(catalog: Catalog) -> None:
    for spec in catalog.load_all():
        lock = read_lock(spec)
        assert lock["schema_version"] == LOCK_SCHEMA and lock["inputs"] == lock_inputs(spec)
        assert lock["agent"]["version"] == spec.agent.version  # the catalog pins exact versions
        assert all(pkg["hashes"] for pkg in lock["python"]["packages"])


def test_missing_lock_says_to_run_lock(user_catalog: Path, catalog: Catalog) -> None:
    source = catalog.load("opencode").source_dir / "image.toml"
    write_spec(user_catalog, "mine", source.read_text())
    with pytest.raises(LockError, match=r"mine/lock.json: no lock for image 'mine'; run `agentbake lock mine`"):
        read_lock(Catalog.discover(user_catalog).load("mine"))


def test_stale_lock_names_what_changed(user_catalog: Path, catalog: Catalog) -> None:
    original = catalog.load("opencode")
    text = (original.source_dir / "image.toml").read_text().replace('"1.18.33"', '"1.18.34"')
    write_spec(user_catalog, "opencode", text, lock_from=original.lock_path)
    with pytest.raises(LockError) as info:
        read_lock(Catalog.discover(user_catalog).load("opencode"))
    message = str(info.value)
    assert "stale lock" in message and "inputs.agent.version ('1.18.33' -> '1.18.34')" in message
    assert "run `agentbake lock opencode`" in message


def test_corrupt_lock(user_catalog: Path, catalog: Catalog) -> None:
    original = catalog.load("opencode")
    path = write_spec(user_catalog, "opencode", (original.source_dir / "image.toml").read_text())
    (path.parent / "lock.json").write_text("{not json")
    with pytest.raises(LockError, match="not valid JSON"):
        read_lock(Catalog.discover(user_catalog).load("opencode"))
    (path.parent / "lock.json").write_text('{"schema_version": 0}')
    with pytest.raises(LockError, match="lock schema is not 1"):
        read_lock(Catalog.discover(user_catalog).load("opencode"))


def test_requirements_require_hashes(catalog: Catalog) -> None:
    lines = requirements_txt(read_lock(catalog.load("claude-code"))["python"]).splitlines()
    assert lines and all("==" in line and "--hash=sha256:" in line for line in lines)
    assert any(line.startswith("uvicorn==") for line in lines)


# Codex's platform package is an npm alias (`npm:@openai/codex@<version>-linux-x64`) of its own package.
@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_lock_resolves_a_range_to_exact_hashed_artifacts(user_catalog: Path, catalog: Catalog, name: str) -> None:
    """A real resolution against the npm registry and PyPI, for a range instead of a pinned version.

    The range ends at the committed lock's version, so it resolves to that exact artifact whatever the
    registry published since: the test never depends on the newest release of the day."""
    original = catalog.load(name)
    locked = read_lock(original)
    pinned = locked["agent"]["version"]
    major, minor, _ = pinned.split(".")
    text = (original.source_dir / "image.toml").read_text()
    assert f'version = "{pinned}"' in text
    write_spec(
        user_catalog,
        f"{name}-range",
        text.replace(f'version = "{pinned}"', f'version = ">={major}.{minor}.0 <={pinned}"'),
    )
    spec = Catalog.discover(user_catalog).load(f"{name}-range")
    lock = write_lock(spec)
    assert read_lock(spec) == lock == json.loads(spec.lock_path.read_text())
    assert lock["agent"] == locked["agent"]  # the highest version in the range, exactly
    native = lock["native"]
    assert native == locked["native"]  # the registry's sha512 for it is the one the catalog committed
    digest = base64.b64decode(native["integrity"].removeprefix("sha512-"))
    assert digest.hex() == native["sha512"] and len(digest) == hashlib.sha512().digest_size


def test_lock_resolves_a_pip_range_to_the_highest_version_with_hashed_wheels(
    user_catalog: Path, catalog: Catalog
) -> None:
    """A Python CLI: a PEP 440 range ending at the committed version, compiled against PyPI like the gateway's."""
    original = catalog.load("mini-swe-agent")
    locked = read_lock(original)
    pinned = locked["agent"]["version"]
    text = (original.source_dir / "image.toml").read_text()
    write_spec(user_catalog, "mini-range", text.replace(f'version = "{pinned}"', f'version = ">=2.4,<={pinned}"'))
    lock = write_lock(Catalog.discover(user_catalog).load("mini-range"))
    assert lock["agent"] == locked["agent"] and "npm" not in lock and "native" not in lock
    (wheel,) = [p for p in lock["agent_python"]["packages"] if p["name"] == "mini-swe-agent"]
    assert wheel in locked["agent_python"]["packages"]  # the same version with the same hashes
    assert all(p["hashes"] for p in lock["agent_python"]["packages"])
    # `exclude` leaves out `datasets` and what only it needs; what litellm needs too stays.
    names = {p["name"] for p in lock["agent_python"]["packages"]}
    assert names.isdisjoint({"datasets", "pyarrow", "pandas", "numpy"}) and {"litellm", "huggingface-hub"} <= names
    assert lock["agent_python"]["version"] == original.base.python


def test_lock_rejects_a_native_package_the_agent_does_not_have(user_catalog: Path, catalog: Catalog) -> None:
    text = (catalog.load("claude-code").source_dir / "image.toml").read_text()
    write_spec(user_catalog, "bad", text.replace("claude-code-linux-x64", "claude-code-linux-sparc"))
    with pytest.raises(LockError, match=r"not an optional dependency .* pick one of: .*claude-code-linux-x64"):
        write_lock(Catalog.discover(user_catalog).load("bad"))


def test_lock_without_npm_says_what_to_install(catalog: Catalog, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LockError, match=r"needs npm on PATH .* install Node.js and npm"):
        write_lock(catalog.load("opencode"))
    assert read_lock(catalog.load("opencode"))  # the committed lock is untouched


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            'uvicorn>=0.32; python_version < "3.13"',
            "optional-dependencies.gateway entry 'uvicorn>=0.32; python_version < \"3.13\"' has an environment marker",
        ),
        ("uvicorn>>0.32", "optional-dependencies.gateway: 'uvicorn>>0.32' is not a valid requirement"),
    ],
)
def test_gateway_extra_entries_that_cannot_be_locked(tmp_path: Path, entry: str, message: str) -> None:
    """A checkout whose pyproject.toml lists a gateway requirement the lock inputs cannot spell the same way
    from wheel metadata (a marker) or at all (not a requirement): the error names the file and the entry."""
    root = builtin_root()
    for folder in ("agentbake", "images", "templates"):
        shutil.copytree(root / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    base, gateway = (root / "pyproject.toml").read_text().split("\ngateway = [")
    gateway = gateway.replace('"uvicorn>=0.55,<0.56"', json.dumps(entry), 1)
    (tmp_path / "pyproject.toml").write_text(f"{base}\ngateway = [{gateway}")
    probe = "from agentbake.buildkit.lock import gateway_requirements\ntry:\n    gateway_requirements()\n"
    probe += "except Exception as exc:\n    print(type(exc).__name__, exc)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.startswith(f"LockError {tmp_path / 'pyproject.toml'}: "), out.stderr
    assert message in out.stdout
