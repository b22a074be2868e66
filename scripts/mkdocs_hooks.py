"""MkDocs hook (mkdocs.yml): the site's pages are the repository's Markdown where it lives, under its own path
(so a relative link between READMEs works on the site as in the repository), plus one API page per public
package listing what its `__init__.py` exports; the navigation is built from them. `DocstringsAsMarkdown`
is the docstring renderer's (griffe's) extension: docstrings are plain text, the site renders Markdown."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
# Navigation sections: title -> the folders whose README.md (at any depth) it holds.
SECTIONS = {
    "Packages": ["agentbake"],
    "Catalog and examples": ["images", "templates", "examples"],
    "Benchmarks": ["bench"],
    "Tests": ["tests"],
    "Scripts": ["scripts"],
}
# A docstring paragraph that is example code: a doctest, or Python starting with an import.
_CODE = re.compile(r"(>>> |from [\w.]+ import |import [\w.]+$)")
# A span in backticks, kept as it is.
_BACKTICKED = re.compile(r"(`[^`]*`)")
# The public packages: `agentbake` and each of its subpackages.
PACKAGES = ["agentbake", *sorted(f"agentbake.{p.parent.name}" for p in ROOT.glob("agentbake/*/__init__.py"))]


def _readmes(folder: str) -> list[str]:
    """Every README.md under `folder`, shallowest first, leaving out the wheel's build copies and caches."""
    found = [p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("README.md")]
    kept = [path for path in found if not {"_catalog", "__pycache__", "node_modules"} & set(path.split("/"))]
    return sorted(kept, key=lambda path: (path.count("/"), path))


def _guides() -> list[Path]:
    """docs/*.md but its README (the section's index)."""
    return sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")


def exports(package: str) -> list[str]:
    """Dotted paths of what `package` exports, each at the module defining it (a lazy `_EXPORTS` table or a
    `from M import name`), read from its `__init__.py` without importing it; names another package defines
    are documented there, not twice."""
    tree = ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text(encoding="utf-8"))
    origin: dict[str, str] = {}
    lazy: dict[str, str] = {}
    public: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            origin.update({alias.asname or alias.name: node.module for alias in node.names})
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "_EXPORTS":
                lazy = ast.literal_eval(node.value)
                origin.update(lazy)
            elif name == "__all__":
                value = node.value  # a list, or sorted(_EXPORTS)
                public = sorted(lazy) if isinstance(value, ast.Call) else list(ast.literal_eval(value))
    own = [(origin.get(name, package), name) for name in public if not name.startswith("__")]
    return [f"{module}.{name}" for module, name in own if module == package or module.startswith(f"{package}.")]


def _api_page(package: str) -> str:
    """The package's docstring, then an entry per exported name."""
    intro = f"# `{package}`\n\n::: {package}\n    options:\n      members: false\n      show_root_heading: false\n"
    return "\n".join([intro, *(f"::: {path}\n" for path in exports(package))])


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Replace what MkDocs found in docs/ by the repository's pages at their repository paths, add the API
    pages, and set the navigation to all of them."""
    docs_dir = Path(config.docs_dir).resolve()
    for file in list(files):
        if file.abs_src_path and Path(file.abs_src_path).resolve().is_relative_to(docs_dir):
            files.remove(file)

    def add(path: str) -> str:
        # Included explicitly: MkDocs leaves out a folder named templates/ by default (theme overrides).
        files.append(File.generated(config, path, abs_src_path=str(ROOT / path), inclusion=InclusionLevel.INCLUDED))
        return path

    nav: list[Any] = [{"Home": add("README.md")}]
    nav.append({"Guides": [add("docs/README.md"), *(add(p.relative_to(ROOT).as_posix()) for p in _guides())]})
    for title, folders in SECTIONS.items():
        nav.append({title: [{path.removesuffix("/README.md"): add(path)} for f in folders for path in _readmes(f)]})
    api = []
    for package in PACKAGES:
        path = f"api/{package}.md"
        files.append(File.generated(config, path, content=_api_page(package)))
        api.append({package: path})
    nav.append({"API reference": api})
    nav.append({"Changelog": add("CHANGELOG.md")})
    config.nav = nav
    return files


class DocstringsAsMarkdown(griffe.Extension):
    """Each docstring's example code in a fenced block, and `<...>` outside backticks shown rather than taken
    for HTML (`agentbake/claude-code:<hash12>`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.docstring.value)


def as_markdown(text: str) -> str:
    """Example code fenced (a paragraph matching `_CODE`, and the paragraphs after it that start in lower case:
    prose starts with a capital or a backtick), `<` escaped in the prose."""
    blocks: list[tuple[bool, list[str]]] = []  # (is code, paragraphs)
    for paragraph in text.split("\n\n"):
        after_code = bool(blocks) and blocks[-1][0]
        if after_code and paragraph[:1].islower():
            blocks[-1][1].append(paragraph)
        elif _CODE.match(paragraph):
            blocks.append((True, [paragraph]))
        elif paragraph.startswith("    "):  # an indented block is code already
            blocks.append((False, [paragraph]))
        else:
            parts = _BACKTICKED.split(paragraph)
            blocks.append((False, ["".join(p if p.startswith("`") else p.replace("<", "&lt;") for p in parts)]))
    fenced = ("```python\n" + "\n\n".join(ps) + "\n```" if code else ps[0] for code, ps in blocks)
    return "\n\n".join(fenced)
