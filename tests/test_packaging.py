"""The wheel ships the catalog, and an installed agentbake finds it without a checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from agentbake.buildkit.catalog import builtin_root


def test_wheel_ships_the_catalog_and_uses_it(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(builtin_root())],
        check=True,
    )
    (wheel,) = tmp_path.glob("agentbake-*.whl")
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
