"""Build-kit commands: images, render, lock, build, base, doctor."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from agentbake.buildkit.base import DEFAULT_MIRROR, debian_base
from agentbake.buildkit.build import BuildResult, build, plan
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.doctor import run_checks
from agentbake.buildkit.engine import connect, image_id
from agentbake.buildkit.lock import read_lock, write_lock
from agentbake.buildkit.progress import ConsoleProgress
from agentbake.buildkit.prune import prune
from agentbake.buildkit.render import render
from agentbake.buildkit.spec import ImageSpec
from agentbake.clikit import json_option
from agentbake.clikit import print_json as _print_json
from agentbake.errors import AgentbakeError

err = Console(stderr=True, highlight=False, soft_wrap=True)

catalog_option = click.option(
    "--catalog",
    "catalog_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder of <name>/image.toml specs (default: ./images if present, else the built-in catalog).",
)

ca_cert_option = click.option(
    "--ca-cert",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Extra CA bundle for npm/pip/curl/apt in the build (default: SSL_CERT_FILE, REQUESTS_CA_BUNDLE or "
    "NODE_EXTRA_CA_CERTS when set); part of the content hash.",
)
no_ca_cert_option = click.option("--no-ca-cert", is_flag=True, help="Do not auto-detect a CA bundle.")


def _ca_bundle(ca_cert: Path | None, no_ca_cert: bool) -> Path | None:
    if no_ca_cert and ca_cert:
        raise click.UsageError("--ca-cert and --no-ca-cert exclude each other")
    return None if no_ca_cert else (ca_cert or detect_ca_bundle())


def _select(catalog: Catalog, names: tuple[str, ...], all_images: bool) -> list[ImageSpec]:
    if all_images == bool(names):
        raise click.UsageError("name one or more images, or pass --all")
    return catalog.load_all() if all_images else [catalog.load(n) for n in names]


@click.command("images")
@catalog_option
@ca_cert_option
@no_ca_cert_option
@json_option
def images_command(catalog_dir: Path | None, ca_cert: Path | None, no_ca_cert: bool, as_json: bool) -> None:
    """List the catalog: agent, locked version, current tag, built or not."""
    catalog = Catalog.discover(catalog_dir)
    ca = _ca_bundle(ca_cert, no_ca_cert)
    try:
        client = connect(timeout=10)
    except AgentbakeError:
        client = None  # listing still works without an engine; tags need the base image id
    rows = []
    for spec in catalog.load_all():
        row: dict[str, Any] = {
            "image": spec.name,
            "agent": spec.agent.name,
            "locked_version": None,
            "tag": None,
            "built": None,
            "problem": None,
        }
        try:
            row["locked_version"] = read_lock(spec)["agent"]["version"]
            if client is not None:
                tag = plan(client, spec, catalog.templates_dir, ca_cert=ca).tag
                row["tag"], row["built"] = tag, image_id(client, tag) is not None
        except AgentbakeError as exc:
            row["problem"] = str(exc)
        rows.append(row)
    if as_json:
        for row in rows:
            _print_json(row)
        return
    table = Table("image", "agent", "locked", "tag", "built")
    for row in rows:
        built = "-" if row["built"] is None else ("yes" if row["built"] else "no")
        table.add_row(row["image"], row["agent"], row["locked_version"] or "-", row["tag"] or "-", built)
    Console().print(table)
    for row in rows:
        if row["problem"]:
            err.print(f"[yellow]{row['image']}[/]: {row['problem']}")


@click.command("render")
@click.argument("image")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the Dockerfile and context here.")
@click.option("--base-image", help="Override the spec's base image reference.")
@ca_cert_option
@no_ca_cert_option
@catalog_option
def render_command(
    image: str,
    output: Path | None,
    base_image: str | None,
    ca_cert: Path | None,
    no_ca_cert: bool,
    catalog_dir: Path | None,
) -> None:
    """Print (or write with -o) an image's Dockerfile and build context, for inspection or other builders."""
    catalog = Catalog.discover(catalog_dir)
    ca = _ca_bundle(ca_cert, no_ca_cert)
    rendered = render(catalog.load(image), catalog.templates_dir, base_image=base_image, ca_cert=ca)
    if output is None:
        click.echo(rendered.dockerfile, nl=False)
        return
    rendered.write(output)
    err.print(f"wrote {len(rendered.context_files())} files to {output}")


@click.command("lock")
@click.argument("names", nargs=-1)
@click.option("--all", "all_images", is_flag=True, help="Lock every catalog image.")
@catalog_option
@json_option
def lock_command(names: tuple[str, ...], all_images: bool, catalog_dir: Path | None, as_json: bool) -> None:
    """Resolve floating versions to exact, hashed ones in images/<name>/lock.json."""
    for spec in _select(Catalog.discover(catalog_dir), names, all_images):
        lock = write_lock(spec)
        summary = {
            "image": spec.name,
            "agent_version": lock["agent"]["version"],
            "lock": str(spec.lock_path),
            "python_packages": len(lock["python"]["packages"]),
        }
        if as_json:
            _print_json(summary)
        else:
            err.print(
                f"locked {spec.name}: {spec.agent.package}@{summary['agent_version']}, "
                f"{summary['python_packages']} Python packages -> {spec.lock_path}"
            )


@click.command("build")
@click.argument("names", nargs=-1)
@click.option("--all", "all_images", is_flag=True, help="Build every catalog image.")
@click.option("--base-image", help="Override the spec's base image reference for this build.")
@ca_cert_option
@no_ca_cert_option
@click.option("--no-cache", is_flag=True, help="Rebuild even if the tag exists, without the layer cache.")
@click.option(
    "--builder",
    type=click.Choice(["legacy", "buildkit"]),
    default="legacy",
    show_default=True,
    help="The engine's builder; both build the same Dockerfile into the same content-addressed tag.",
)
@catalog_option
@json_option
def build_command(
    names: tuple[str, ...],
    all_images: bool,
    base_image: str | None,
    ca_cert: Path | None,
    no_ca_cert: bool,
    no_cache: bool,
    builder: str,
    catalog_dir: Path | None,
    as_json: bool,
) -> None:
    """Build images, content-addressed: an unchanged image is found, not rebuilt."""
    catalog = Catalog.discover(catalog_dir)
    specs = _select(catalog, names, all_images)
    ca = _ca_bundle(ca_cert, no_ca_cert)
    client = connect()
    for spec in specs:
        progress = ConsoleProgress(spec.name, err)
        try:
            result = build(
                client,
                plan(client, spec, catalog.templates_dir, base_image=base_image, ca_cert=ca),
                no_cache=no_cache,
                builder=builder,  # type: ignore[arg-type]  # click.Choice guarantees a Builder
                progress=progress,
            )
        finally:
            progress.close()
        _report(result, as_json)


def _report(result: BuildResult, as_json: bool) -> None:
    if as_json:
        _print_json(result)
    else:
        state = "cached" if result.cached else "built"
        err.print(f"[green]{state}[/] {result.tag} ({result.size_bytes / 1e6:.0f} MB, {result.seconds:.1f}s)")


@click.command("prune")
@click.option("--dry-run", is_flag=True, help="List what would be removed.")
@ca_cert_option
@no_ca_cert_option
@catalog_option
@json_option
def prune_command(
    dry_run: bool, ca_cert: Path | None, no_ca_cert: bool, catalog_dir: Path | None, as_json: bool
) -> None:
    """Remove catalog image tags that current inputs no longer build to, and task images and bundles this agentbake no
    longer makes."""
    from agentbake.tasks.prune import prune_task_artifacts

    catalog = Catalog.discover(catalog_dir)
    ca = _ca_bundle(ca_cert, no_ca_cert)
    client = connect()
    plans = [plan(client, spec, catalog.templates_dir, ca_cert=ca) for spec in catalog.load_all()]
    for result in [*prune(client, plans, dry_run=dry_run), *prune_task_artifacts(client, dry_run=dry_run)]:
        if as_json:
            _print_json(result)
        else:
            state = "removed" if result.removed else f"kept ({result.reason})"
            err.print(f"{state}: {result.tag} ({result.size_bytes / 1e6:.0f} MB)")


@click.group("base")
def base_group() -> None:
    """Base images for engines that cannot pull from a registry."""


@base_group.command("debian")
@click.option("--suite", type=click.Choice(["bookworm", "trixie"]), default="bookworm", show_default=True)
@click.option("--mirror", default=DEFAULT_MIRROR, show_default=True, help="Debian mirror for debootstrap.")
@click.option("--tag", help="Image reference to create (default: debian:<suite>-slim, what specs use).")
@json_option
def base_debian_command(suite: str, mirror: str, tag: str | None, as_json: bool) -> None:
    """Build a minimal Debian image with debootstrap and `docker import` (idempotent)."""
    log: Callable[[str], None] = (lambda line: None) if as_json else (lambda line: err.print(line, markup=False))
    result = debian_base(connect(), suite, mirror=mirror, tag=tag, log=log)
    if as_json:
        _print_json(result)
    else:
        err.print(f"{'created' if result.created else 'present'}: {result.tag} ({result.id[:19]})")


@click.command("doctor")
@catalog_option
@json_option
def doctor_command(catalog_dir: Path | None, as_json: bool) -> None:
    """Check the engine, buildx, base images, CA bundle and disk space; print the fix for each problem."""
    checks = run_checks(Catalog.discover(catalog_dir))
    if as_json:
        for check in checks:
            _print_json(check)
    else:
        for check in checks:
            mark = "[green]ok[/]  " if check.ok else "[red]FAIL[/]"
            err.print(f"{mark} {check.name}: {check.detail}" + ("" if check.ok else f"\n       fix: {check.fix}"))
    if not all(check.ok for check in checks):
        sys.exit(1)
