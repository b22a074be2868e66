"""`agentbake docs` serves every guide of the checkout: the README, docs/*.md and each folder's README, by its
name or the last part of it; a name that is ambiguous or unknown says which names there are."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from agentbake.buildkit.catalog import builtin_root
from agentbake.cli import main

ROOT = builtin_root()


def _docs(*args: str):
    return CliRunner().invoke(main, ["docs", *args])


def test_every_guide_and_folder_readme_is_listed() -> None:
    listed = dict(line.split("\t") for line in _docs().stdout.splitlines())
    expected = {"readme": ROOT / "README.md"}
    expected |= {p.stem: p for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"}
    for folder in ("agentbake", "images", "templates", "examples"):
        expected |= {p.parent.relative_to(ROOT).as_posix(): p for p in (ROOT / folder).rglob("README.md")}
    assert {name: Path(path) for name, path in listed.items()} == expected
    assert {"agentbake/trl", "agentbake/runner/harness", "images", "examples/tasks"} <= set(listed)


def test_a_guide_is_printed_by_its_name_or_last_part() -> None:
    assert _docs("remote").stdout == (ROOT / "docs/remote.md").read_text()
    assert _docs("trl").stdout == (ROOT / "agentbake/trl/README.md").read_text()
    assert _docs("runner/harness").stdout == (ROOT / "agentbake/runner/harness/README.md").read_text()
    assert _docs("agentbake/audit").stdout == (ROOT / "agentbake/audit/README.md").read_text()
    assert _docs("audit").stdout == (ROOT / "docs/audit.md").read_text()  # a whole name wins over a last part


def test_an_ambiguous_or_unknown_name_lists_the_choices() -> None:
    ambiguous = _docs("tasks")
    assert ambiguous.exit_code == 1
    assert "'tasks' names several guides: agentbake/tasks, examples/tasks; pass one of these names" in ambiguous.stderr
    unknown = _docs("remtoe")
    assert unknown.exit_code == 1
    assert "no guide named 'remtoe'; known guides: agentbake, agentbake/audit," in unknown.stderr
