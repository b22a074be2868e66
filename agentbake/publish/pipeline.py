"""One image through every requested target: registry, then E2B and Hugging Face, recorded in the manifest.

The image is built first only when a target needs local bits and the engine lacks its content-hash tag.
A failed target is reported (action `failed`) and the targets that depend on it are not attempted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import docker

from agentbake.buildkit.build import BuildPlan, build
from agentbake.buildkit.builders import seconds_since
from agentbake.buildkit.engine import find_image
from agentbake.errors import AgentbakeError, PublishError
from agentbake.publish import e2b, hf
from agentbake.publish.manifest import ImageRecord, Published, RegistryRef
from agentbake.publish.registry import Repository, push_to_registry


@dataclass(frozen=True)
class PublishOptions:
    """What `agentbake publish` was asked to do."""

    registry: Repository | None = None
    latest: bool = True
    e2b: bool = False
    e2b_from_dockerfile: bool = False
    hf: bool = False
    hf_space: str | None = None
    dry_run: bool = False
    retries: int = 3
    retry_delay: float = 1.0


@dataclass(frozen=True)
class PublishResult:
    """One image at one target: the `--json` line and a row of the summary table."""

    image: str
    target: str
    tag: str
    reference: str | None
    digest: str | None
    action: str
    seconds: float
    error: str | None = None


def check_options(options: PublishOptions) -> None:
    """Usage errors before any work: every target must have what it publishes from."""
    if not (options.registry or options.e2b or options.hf or options.hf_space):
        raise PublishError("nothing to publish to: pass --registry REPO, --e2b, --hf or --hf-space NS/NAME")
    if options.e2b and not (options.registry or options.e2b_from_dockerfile):
        raise PublishError("--e2b builds from the pushed image: pass --registry REPO, or --e2b-from-dockerfile")
    if options.hf and not (options.registry or options.hf_space):
        raise PublishError("--hf needs a reference a sandbox can pull: pass --registry REPO or --hf-space NS/NAME")


def publish_image(
    client: docker.DockerClient,
    build_plan: BuildPlan,
    options: PublishOptions,
    published: Published,
    log: Callable[[str], None] = lambda line: None,
) -> list[PublishResult]:
    """Publish one planned image to every target in `options`; the manifest records what succeeded."""
    spec = build_plan.rendered.spec
    tag = build_plan.digest[:12]
    results: list[PublishResult] = []

    def record() -> ImageRecord:  # created on the first success: a failed publish records nothing
        return published.record(spec.name, build_plan.digest, build_plan.tag)

    def report(
        target: str, started: float, reference: str | None, digest: str | None, action: str, error: str | None = None
    ) -> None:
        results.append(PublishResult(spec.name, target, tag, reference, digest, action, seconds_since(started), error))

    def local_image() -> docker.models.images.Image:
        image = find_image(client, build_plan.tag)
        if image is None:
            log(f"{spec.name}: not built yet, building {build_plan.tag}")
            image = client.images.get(build(client, build_plan).id)
        return image

    registry_ref: str | None = None
    credentials = None
    if options.registry is not None:
        repository = options.registry.child(spec.name)
        started = time.monotonic()
        if options.dry_run:
            report("registry", started, f"{repository.reference}:{tag}", None, "dry-run")
            registry_ref = f"{repository.reference}:{tag}"
        else:
            try:
                # Nothing to build when the registry holds these inputs' tag and no local build exists.
                pushed, credentials = push_to_registry(
                    client,
                    repository,
                    tag,
                    build_plan.tag,
                    local_image,
                    latest=options.latest,
                    retries=options.retries,
                    retry_delay=options.retry_delay,
                    log=log,
                )
            except AgentbakeError as exc:
                report("registry", started, f"{repository.reference}:{tag}", None, "failed", str(exc))
                return results
            registry_ref = pushed.reference
            record().registry[repository.reference] = RegistryRef(reference=pushed.reference, digest=pushed.digest)
            report("registry", started, pushed.reference, pushed.digest, pushed.action)

    if options.hf_space:
        started = time.monotonic()
        space_ref = f"hf.co/spaces/{options.hf_space}"
        if options.dry_run:
            report("hf-space", started, space_ref, None, "dry-run")
        else:
            try:
                space_ref = hf.publish_space(build_plan.rendered, tag, options.hf_space)
            except AgentbakeError as exc:
                report("hf-space", started, space_ref, None, "failed", str(exc))
                return results
            record().hf_space = options.hf_space
            report("hf-space", started, space_ref, None, "pushed")

    if options.hf:
        started = time.monotonic()
        hf_ref = registry_ref or f"hf.co/spaces/{options.hf_space}"
        if options.dry_run:
            report("hf", started, hf_ref, None, "dry-run")
        else:
            try:
                hf.check_boot(client, local_image().id)
            except AgentbakeError as exc:
                report("hf", started, hf_ref, None, "failed", str(exc))
                return results
            record().hf_image = hf_ref
            report("hf", started, hf_ref, None, "checked")

    if options.e2b:
        started = time.monotonic()
        source = None if options.e2b_from_dockerfile else registry_ref
        name = f"{e2b.template_name(spec.name)}:{tag}"
        if options.dry_run:
            report("e2b", started, name, None, "dry-run")
        else:
            try:
                made = e2b.publish_template(
                    build_plan.rendered,
                    tag,
                    image_reference=source,
                    credentials=credentials,
                    latest=options.latest,
                    log=log,
                )
            except AgentbakeError as exc:
                report("e2b", started, name, None, "failed", str(exc))
                return results
            record().e2b_template = made.template
            report("e2b", started, made.template, None, made.action)
    return results
