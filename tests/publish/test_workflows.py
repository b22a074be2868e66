"""The GitHub Actions workflows: actionlint and zizmor pass, actions are pinned, the matrix is the catalog's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from agentbake.cli import main

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
BIN = Path(sys.executable).parent
FILES = sorted(WORKFLOWS.glob("*.yml"))


def _tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / name), *args], capture_output=True, text=True, check=False, timeout=120)


def test_actionlint_passes() -> None:
    result = _tool("actionlint", *map(str, FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing_even_pedantic() -> None:
    result = _tool("zizmor", "--offline", "--persona", "pedantic", "--format", "json", str(WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_least_privilege_pinned_actions_and_no_persisted_credentials(path: Path) -> None:
    workflow = yaml.safe_load(path.read_text())
    assert "permissions" in workflow, f"{path.name}: no top-level permissions"
    for job_name, job in workflow["jobs"].items():
        for step in job["steps"]:
            uses = step.get("uses")
            if uses is None:
                continue
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), f"{path.name} {job_name}: {uses} not pinned"
            if uses.startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_publish_matrix_comes_from_the_catalog() -> None:
    workflow = yaml.safe_load((WORKFLOWS / "publish.yml").read_text())
    matrix_job, publish_job = workflow["jobs"]["matrix"], workflow["jobs"]["publish"]
    assert any("agentbake ci-matrix --json" in step.get("run", "") for step in matrix_job["steps"])
    assert publish_job["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.images) }}"
    printed = json.loads(CliRunner().invoke(main, ["ci-matrix", "--json"]).stdout)
    on_disk = sorted(p.parent.name for p in (WORKFLOWS.parents[1] / "images").glob("*/image.toml"))
    assert printed == {"image": on_disk} and on_disk
