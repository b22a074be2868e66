"""Task environments through every requested target: `agentbake publish AGENT --path DIR...`.

Each task is resolved as a rollout resolves it. Tasks with the same environment hash share one layered image, published
once. It goes to the registry as `PREFIX/agentbake-env:<hash12>`, to E2B as `agentbake-env-<hash12>:<hash12>`, and to
Hugging Face as the registry reference. A target that holds it is skipped; the manifest records it by hash.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from agentbake.buildkit.builders import seconds_since
from agentbake.buildkit.engine import find_image
from agentbake.errors import AgentbakeError, PublishError
from agentbake.publish import e2b, hf
from agentbake.publish.manifest import EnvironmentRecord, Published, RegistryRef
from agentbake.publish.pipeline import PublishOptions, PublishResult
from agentbake.publish.registry import push_to_registry
from agentbake.tasks.layered import REPOSITORY, layered_image, layered_tag
from agentbake.tasks.resolver import ImageResolver, ProgressFactory, ResolvedImage
from agentbake.tasks.task import Task, discover_tasks


@dataclass
class Environment:
    """One environment hash: the tasks that share it and how any of them resolved."""

    environment: str
    resolved: ResolvedImage
    tasks: list[Task] = field(default_factory=list)


def check_task_options(options: PublishOptions) -> None:
    """Refuse sources other than a registry: a layered image reaches E2B and Hugging Face only through one."""
    if options.e2b_from_dockerfile:
        raise PublishError(
            "--path: an environment's E2B template is built from its registry image; use --e2b with --registry "
            "REPO instead of --e2b-from-dockerfile"
        )
    if options.hf_space:
        raise PublishError("--path: --hf-space holds one catalog image; use --hf with --registry REPO")


def environments(
    client: docker.DockerClient,
    agent: str,
    task_dirs: list[Path],
    *,
    progress: ProgressFactory | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> tuple[list[Environment], list[PublishResult]]:
    """The environments of the tasks under `task_dirs` with the agent image `agent`, built where missing.

    A task that cannot be resolved is a failed result naming it."""
    from agentbake.runner.images import image_labels

    tasks = [task for task in discover_tasks(task_dirs) if task.has_own_image]
    if not tasks:
        log("no task has an image of its own: they run in the agent's image")
        return [], []
    resolver = ImageResolver(agent, image_labels(agent), client=lambda: client, progress=progress)
    found: dict[str, Environment] = {}
    failed: list[PublishResult] = []
    for task in tasks:
        started = time.monotonic()
        try:
            resolved = resolver.resolve(task)
        except AgentbakeError as exc:
            failed.append(PublishResult(task.name, "task", "", None, None, "failed", seconds_since(started), str(exc)))
            continue
        assert resolved.environment is not None
        found.setdefault(resolved.environment, Environment(resolved.environment, resolved)).tasks.append(task)
        log(f"{task.name}: environment {resolved.environment[:12]}")
    return sorted(found.values(), key=lambda env: env.environment), failed


def publish_environment(
    client: docker.DockerClient,
    env: Environment,
    agent: str,
    options: PublishOptions,
    published: Published,
    *,
    progress: ProgressFactory | None = None,
    log: Callable[[str], None] = lambda line: None,
    e2b_poll_s: float = e2b.POLL_S,
) -> list[PublishResult]:
    """One environment to every target in `options`; the manifest records what succeeded."""
    tag = env.environment[:12]
    local_tag = layered_tag(env.environment)
    image_name = f"{REPOSITORY}:{tag}"
    results: list[PublishResult] = []

    def record() -> EnvironmentRecord:
        entry = published.environment(env.environment, local_tag, agent)
        entry.tasks = sorted({*entry.tasks, *(task.name for task in env.tasks)})
        return entry

    def report(
        target: str, started: float, reference: str | None, digest: str | None, action: str, error: str | None = None
    ) -> None:
        results.append(PublishResult(image_name, target, tag, reference, digest, action, seconds_since(started), error))

    def local_image() -> docker.models.images.Image:
        image = find_image(client, local_tag)
        if image is None:
            log(f"{local_tag}: layering the agent into {env.resolved.ref}")
            display = progress(local_tag) if progress else None
            try:
                made = layered_image(client, env.resolved.ref, env.resolved.bundle or "", progress=display)
            finally:
                close = getattr(display, "close", None)
                if close is not None:
                    close()
            image = client.images.get(made.id)
        return image

    registry_ref = None
    credentials = None
    if options.registry is not None:
        repository = options.registry.child(REPOSITORY)
        started = time.monotonic()
        try:
            pushed, credentials = push_to_registry(
                client,
                repository,
                tag,
                local_tag,
                local_image,
                latest=False,
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

    if options.hf and registry_ref is not None:
        started = time.monotonic()
        try:
            # The runnable image has every command the layered one has on PATH (the agent's copy is off it).
            hf.check_boot(client, env.resolved.ref)
        except AgentbakeError as exc:
            report("hf", started, registry_ref, None, "failed", str(exc))
            return results
        record().hf_image = registry_ref
        report("hf", started, registry_ref, None, "checked")

    if options.e2b and registry_ref is not None:
        started = time.monotonic()
        labels = env.resolved.labels
        first = env.tasks[0]
        try:
            made = e2b.publish_environment(
                registry_ref,
                env.environment,
                user=labels.user,
                workdir=labels.dir_workdir,
                credentials=credentials,
                cpus=max(1, round(first.cpus or 2)),
                memory_mb=first.memory_mb or 2048,
                log=log,
                poll_s=e2b_poll_s,
            )
        except AgentbakeError as exc:
            report("e2b", started, e2b.environment_template(env.environment), None, "failed", str(exc))
            return results
        record().e2b_template = made.template
        report("e2b", started, made.template, None, made.action)
    return results
