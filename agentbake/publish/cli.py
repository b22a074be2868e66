"""Publishing commands: publish, published, ci-matrix."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click
import docker
from rich.console import Console
from rich.table import Table

from agentbake.buildkit.build import build, plan
from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.cli import (
    _ca_bundle,
    _print_json,
    _select,
    ca_cert_option,
    catalog_option,
    json_option,
    no_ca_cert_option,
)
from agentbake.buildkit.engine import connect, find_image
from agentbake.clikit import tasks_option
from agentbake.errors import PublishError
from agentbake.publish.environments import check_task_options
from agentbake.publish.manifest import Published, load_manifest, manifest_path, save_manifest
from agentbake.publish.pipeline import PublishOptions, PublishResult, check_options, publish_image
from agentbake.publish.registry import Repository
from agentbake.tasks.task import discover_tasks

err = Console(stderr=True, highlight=False, soft_wrap=True)

manifest_option = click.option(
    "--manifest",
    "manifest_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Published manifest file (default: $AGENTBAKE_PUBLISHED, else ./published.json).",
)


@click.command("publish")
@click.argument("names", nargs=-1)
@click.option("--all", "all_images", is_flag=True, help="Publish every catalog image.")
@click.option("--registry", help="Repository prefix, e.g. ghcr.io/OWNER/agentbake; images go to PREFIX/<name>.")
@click.option("--no-latest", is_flag=True, help="Push only the content-hash tag, not `latest`.")
@click.option("--e2b", "to_e2b", is_flag=True, help="Build an E2B template <name>:<hash12> (+ latest); E2B_API_KEY.")
@click.option("--e2b-from-dockerfile", is_flag=True, help="Build the E2B template from the rendered Dockerfile.")
@click.option("--hf", "to_hf", is_flag=True, help="Check the image boots in a Hugging Face sandbox; print its ref.")
@click.option("--hf-space", metavar="NS/NAME", help="Create or update a Docker Space with the Dockerfile and context.")
@tasks_option(
    "Also publish the environments of these tasks (a task dir or a folder of them; repeatable): each task image "
    "with the agent layered in, once per environment hash.",
    required=False,
)
@click.option("--dry-run", is_flag=True, help="Print each action without doing it.")
@click.option("--retries", type=click.IntRange(0, 10), default=3, show_default=True, help="On transient failures.")
@ca_cert_option
@no_ca_cert_option
@catalog_option
@manifest_option
@json_option
def publish_command(
    names: tuple[str, ...],
    all_images: bool,
    registry: str | None,
    no_latest: bool,
    to_e2b: bool,
    e2b_from_dockerfile: bool,
    to_hf: bool,
    hf_space: str | None,
    task_dirs: tuple[Path, ...],
    dry_run: bool,
    retries: int,
    ca_cert: Path | None,
    no_ca_cert: bool,
    catalog_dir: Path | None,
    manifest_file: Path | None,
    as_json: bool,
) -> None:
    """Publish images to a registry, E2B and Hugging Face; built first when missing, skipped when published.

    With --path, the NAMES are the agents layered into each task image (tasks with the same environment share
    one published image and one E2B template). Registry credentials come from the Docker config
    (`docker login`) or AGENTBAKE_REGISTRY_USERNAME / AGENTBAKE_REGISTRY_PASSWORD, never from arguments.
    """
    options = PublishOptions(
        registry=Repository.parse(registry) if registry else None,
        latest=not no_latest,
        e2b=to_e2b or e2b_from_dockerfile,
        e2b_from_dockerfile=e2b_from_dockerfile,
        hf=to_hf,
        hf_space=hf_space,
        dry_run=dry_run,
        retries=retries,
    )
    check_options(options)
    if task_dirs:
        check_task_options(options)
        if not names:
            raise PublishError("--path: name the agent image(s) to layer into the tasks, e.g. claude-code")
    catalog = Catalog.discover(catalog_dir)
    specs = _select(catalog, names, all_images)
    ca = _ca_bundle(ca_cert, no_ca_cert)
    client = connect()
    path = manifest_path(manifest_file)
    published = load_manifest(path)
    results: list[PublishResult] = []
    log = (lambda line: None) if as_json else (lambda line: err.print(f"  {line}", markup=False))
    tasks = discover_tasks(task_dirs) if task_dirs else []
    # With --path the agent image itself is published only when a task runs in it (one without its own image).
    agent_needed = not task_dirs or any(not task.has_own_image for task in tasks)
    for spec in specs:
        build_plan = plan(client, spec, catalog.templates_dir, ca_cert=ca)
        if agent_needed:
            for result in publish_image(client, build_plan, options, published, log=log):
                results.append(result)
                if as_json:
                    _print_json(result)
        elif not dry_run and find_image(client, build_plan.tag) is None:
            log(f"{spec.name}: not built yet, building {build_plan.tag}")
            build(client, build_plan)
        if not dry_run:
            save_manifest(path, published)  # after each image: what succeeded stays recorded
        if task_dirs:
            results += _publish_tasks(client, build_plan.tag, list(task_dirs), options, published, path, as_json, log)
    _summary(results)
    if not dry_run:
        err.print(f"manifest: {path}")
    for result in results:
        if result.target == "hf" and result.action == "checked" and not as_json:
            click.echo(f"{result.image}: huggingface_hub.Sandbox.create(image={result.reference!r})")
    if any(result.action == "failed" for result in results):
        sys.exit(1)


def _publish_tasks(
    client: docker.DockerClient,
    agent: str,
    task_dirs: list[Path],
    options: PublishOptions,
    published: Published,
    path: Path,
    as_json: bool,
    log: Callable[[str], None],
) -> list[PublishResult]:
    """Every environment of the tasks with the agent `agent` layered in, the manifest saved after each."""
    from agentbake.publish.environments import environments, publish_environment
    from agentbake.runner.cli.display import build_progress

    results: list[PublishResult] = []

    def add(found: list[PublishResult]) -> None:
        results.extend(found)
        if as_json:
            for result in found:
                _print_json(result)

    if options.dry_run:  # builds nothing: an environment's hash is known only once its images are built
        for task in discover_tasks(task_dirs):
            if task.has_own_image:
                add([PublishResult(task.name, "environment", "", f"{agent} layered", None, "dry-run", 0.0)])
        return results
    progress = None if as_json else build_progress
    found, failed = environments(client, agent, task_dirs, progress=progress, log=log)
    add(failed)
    for index, env in enumerate(found, 1):
        names = ", ".join(task.name for task in env.tasks)
        log(f"environment {index}/{len(found)} {env.environment[:12]} ({names})")
        add(publish_environment(client, env, agent, options, published, progress=progress, log=log))
        save_manifest(path, published)
    return results


def _summary(results: list[PublishResult]) -> None:
    table = Table("image", "target", "reference", "action", "seconds", title="publish", title_justify="left")
    colours = {
        "pushed": "green",
        "waited": "green",
        "checked": "green",
        "skipped": "cyan",
        "failed": "red",
        "dry-run": "yellow",
    }
    for r in results:
        table.add_row(r.image, r.target, r.reference or "-", f"[{colours[r.action]}]{r.action}[/]", f"{r.seconds:.1f}")
    err.print(table)
    for r in results:
        if r.error:
            err.print(f"[red]error:[/] {r.image} {r.target}: {r.error}", markup=True)


@click.command("published")
@manifest_option
@json_option
def published_command(manifest_file: Path | None, as_json: bool) -> None:
    """Print the published manifest: per image and content hash, and per task environment, its registry, E2B and
    HF references."""
    path = manifest_path(manifest_file)
    published = load_manifest(path, missing_ok=False)
    if as_json:
        click.echo(published.dumps(), nl=False)
        return
    table = Table("image", "hash", "current", "registry", "e2b", "hf")
    for image, by_hash in sorted(published.images.items()):
        for content_hash, record in sorted(by_hash.items()):
            registry = "\n".join(f"{ref.reference}@{ref.digest}" for _, ref in sorted(record.registry.items()))
            current = "yes" if published.current.get(image) == content_hash else ""
            table.add_row(
                image,
                content_hash[:12],
                current,
                registry or "-",
                record.e2b_template or "-",
                record.hf_image or record.hf_space or "-",
            )
    for environment, env in sorted(published.environments.items()):
        registry = "\n".join(f"{ref.reference}@{ref.digest}" for _, ref in sorted(env.registry.items()))
        name = f"environment ({', '.join(env.tasks)})"
        table.add_row(name, environment[:12], "", registry or "-", env.e2b_template or "-", env.hf_image or "-")
    Console().print(table)


@click.command("ci-matrix")
@catalog_option
@json_option
def ci_matrix_command(catalog_dir: Path | None, as_json: bool) -> None:
    """The catalog as a GitHub Actions matrix: {"image": [...]} (the workflow never drifts from the catalog)."""
    names = Catalog.discover(catalog_dir).names()
    if as_json:
        _print_json({"image": names})
    else:
        for name in names:
            click.echo(name)
