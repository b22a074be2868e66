"""The docs site (mkdocs.yml) builds with `--strict`, so a broken link, a page left out or a docstring MkDocs
cannot render fails `make test`; every guide, every folder's README and each public name's API entry is on it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentbake.buildkit.catalog import builtin_root

ROOT = builtin_root()
# scripts/ is no package: the hook module is loaded from its file, as MkDocs loads it.
_SPEC = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
mkdocs_hooks = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mkdocs_hooks)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice of its end of life, not a warning
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def _page(site: Path, source: str) -> Path:
    """Where MkDocs writes the page of a Markdown file (README.md is its folder's index)."""
    folder, name = os.path.split(source)
    stem = name.removesuffix(".md")
    return site / folder / ("index.html" if stem == "README" else f"{stem}/index.html")


def test_every_guide_and_readme_is_a_page(site: Path) -> None:
    sources = ["README.md", "CHANGELOG.md", *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
    for folder in ("agentbake", "images", "templates", "examples", "bench", "tests", "scripts"):
        sources += [p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("README.md")]
    assert len(sources) > 30
    missing = [source for source in sources if not _page(site, source).is_file()]
    assert missing == []
    assert "Remote sandboxes" in _page(site, "docs/remote.md").read_text()


def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    """Each package's page holds an entry for each name it exports, at the module defining it (lazy exports
    included), and `agentbake.runner.Runner`'s entry shows its docstring."""
    for package in mkdocs_hooks.PACKAGES:
        html = (site / "api" / package / "index.html").read_text()
        for path in mkdocs_hooks.exports(package):
            assert f'id="{path}"' in html, path
    runner = (site / "api/agentbake.runner/index.html").read_text()
    assert 'id="agentbake.runner.runner.Runner"' in runner
    assert "claude-code:&lt;hash12&gt;" in runner  # the package docstring's example, fenced, nothing taken for HTML
    assert 'id="agentbake.errors.AgentbakeError"' in (site / "api/agentbake/index.html").read_text()
    assert len(mkdocs_hooks.exports("agentbake.runner")) > 20


def test_docstrings_become_markdown() -> None:
    """Plain-text docstrings: example code is fenced (a doctest, or from an import on, while paragraphs start in
    lower case), indented blocks stay, `<` in prose is escaped outside backticks."""
    text = "Runs `a <b>`, not <c>.\n\nfrom x import y\n\nwith y() as z:\n    z\n\nThen prose.\n\n    <kept>"
    assert mkdocs_hooks.as_markdown(text) == (
        "Runs `a <b>`, not &lt;c>.\n\n"
        "```python\nfrom x import y\n\nwith y() as z:\n    z\n```\n\n"
        "Then prose.\n\n    <kept>"
    )
    assert mkdocs_hooks.as_markdown(">>> 1 + 1\n2") == "```python\n>>> 1 + 1\n2\n```"
