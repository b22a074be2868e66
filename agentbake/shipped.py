"""`agentbake examples` and `agentbake docs`: the example tasks and guides the wheel ships beside the code."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from agentbake.buildkit.catalog import builtin_root
from agentbake.clikit import json_option, print_json
from agentbake.errors import AgentbakeError

# Left behind by running a task's Python in place; never part of an example.
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")
# Folders of the catalog root (the checkout, or the wheel's `_catalog`) whose READMEs are guides.
_CATALOG_FOLDERS = ("images", "templates", "examples")


def examples_dir() -> Path:
    """The example tasks: the checkout's examples/tasks, or the installed wheel's copy."""
    return builtin_root() / "examples" / "tasks"


def guides() -> dict[str, Path]:
    """Every guide by name: `readme`, each docs/*.md by stem, each folder's README.md by folder.

    They come from the checkout, or the installed wheel."""
    root = builtin_root()
    package = Path(__file__).resolve().parent
    found = {"readme": root / "README.md"}
    found.update((p.stem, p) for p in sorted((root / "docs").glob("*.md")) if p.name != "README.md")
    readmes = [p for p in package.rglob("README.md") if not {"_catalog", "__pycache__"} & set(p.parts)]
    found.update((p.parent.relative_to(package.parent).as_posix(), p) for p in readmes)
    for folder in _CATALOG_FOLDERS:
        found.update((p.parent.relative_to(root).as_posix(), p) for p in (root / folder).rglob("README.md"))
    return dict(sorted(found.items()))


def find_guide(name: str) -> Path:
    """The guide called `name`, or the one whose name ends in `/name` (`trl` for `agentbake/trl`)."""
    known = guides()
    if name in known:
        return known[name]
    matches = [full for full in known if full.endswith(f"/{name}")]
    if len(matches) == 1:
        return known[matches[0]]
    if matches:
        raise AgentbakeError(f"{name!r} names several guides: {', '.join(matches)}; pass one of these names")
    raise AgentbakeError(f"no guide named {name!r}; known guides: {', '.join(known)}")


def copy_examples(target: Path) -> list[str]:
    """Copy every example task (and their README) into `target`, created when missing; returns the task
    names. Refuses, before copying anything, when an entry of that name is already there."""
    source = examples_dir()
    entries = sorted(p.name for p in source.iterdir() if p.name != "__pycache__")
    if target.exists() and not target.is_dir():
        raise AgentbakeError(f"{target}: not a folder; pass a folder to copy the example tasks into")
    clashes = [name for name in entries if (target / name).exists()]
    if clashes:
        raise AgentbakeError(f"{target}: already holds {', '.join(clashes)}; remove them or pass another folder")
    target.mkdir(parents=True, exist_ok=True)
    for name in entries:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, ignore=_IGNORED)
        else:
            shutil.copy2(source / name, target / name)
    return [name for name in entries if (source / name / "instruction.md").is_file()]


@click.command("examples")
@click.argument("target", type=click.Path(path_type=Path))
@json_option
def examples_command(target: Path, as_json: bool) -> None:
    """Copy the example tasks (Harbor layout, each with its reference solution) into TARGET."""
    tasks = copy_examples(target)
    if as_json:
        print_json({"dir": str(target), "tasks": tasks})
        return
    click.echo(f"copied {len(tasks)} example tasks to {target}: {', '.join(tasks)}", err=True)
    click.echo(f"try: agentbake rollout claude-code --path {target} --oracle", err=True)


@click.command("docs")
@click.argument("guide", required=False)
def docs_command(guide: str | None) -> None:
    """List the guides shipped with agentbake (the README, docs/ and every folder's README), or print GUIDE:
    a listed name or its last part (`agentbake docs remote`, `agentbake docs trl`)."""
    if guide is None:
        for name, path in guides().items():
            click.echo(f"{name}\t{path}")
        return
    click.echo(find_guide(guide).read_text(encoding="utf-8"), nl=False)
