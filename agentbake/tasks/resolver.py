"""Which image each rollout's sandbox starts from, per task (a Runner holds one resolver).

- A task without its own image runs in the agent's catalog image.
- A task with one runs in its runnable image (`runnable.py` over `image.py`), with the agent bundle
  (`bundle.py`) mounted at /opt/agentbake.

A task's first rollout builds what is missing; later ones find it by tag. Concurrent rollouts wait for one build.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker

from agentbake.buildkit.builders import Progress
from agentbake.buildkit.labels import ImageLabels
from agentbake.errors import AgentbakeError, TaskError
from agentbake.tasks.bundle import AGENT_BIN, ensure_bundle
from agentbake.tasks.image import task_image
from agentbake.tasks.layered import environment_hash
from agentbake.tasks.runnable import runnable_image
from agentbake.tasks.task import Task

ProgressFactory = Callable[[str], Progress]
"""Makes the progress display of one build, given what is built (e.g. `ConsoleProgress`)."""


@dataclass(frozen=True)
class ResolvedImage:
    """What a rollout's sandbox starts from."""

    ref: str
    """The image the sandbox runs: the agent's catalog tag, or the task's runnable image tag."""
    labels: ImageLabels
    """What the harness reads: the agent's labels, with the runnable image's paths and user over them for a
    task image."""
    bundle: str | None = None
    """The agent bundle volume to mount at /opt/agentbake (task images only)."""
    task_image: str | None = None
    """The task's own image (its Dockerfile's build, or its docker_image), when it has one."""
    agent_path: str | None = None
    """PATH for the agent's process (task images: the image's PATH, then the bundle's agent command)."""
    built: tuple[str, ...] = field(default=())
    """What resolving this task built or pulled (empty when everything was cached)."""
    environment: str | None = None
    """The environment hash of a task image with this agent (`agentbake.tasks.layered`): what the clouds that
    mount no bundle start, the layered image `agentbake-env:<hash12>` published under it."""


class ImageResolver:
    """Resolves tasks to images for one agent image; thread-safe, each task resolved once."""

    def __init__(
        self,
        agent_image: str,
        agent_labels: ImageLabels,
        *,
        client: Callable[[], docker.DockerClient],
        progress: ProgressFactory | None = None,
        agent_user: str | None = None,
    ) -> None:
        """`agent_user`: the run's `--agent-user` (a name or uid), over every task's `[agent] user`."""
        self.agent_image = agent_image
        self.agent_labels = agent_labels
        self.agent_user = agent_user
        self._client_factory = client
        self._client: docker.DockerClient | None = None
        self._progress = progress
        self._resolved: dict[Path, ResolvedImage | AgentbakeError] = {}
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def resolve(self, task: Task) -> ResolvedImage:
        """The image `task`'s next rollout starts from; builds, pulls and bundles what the engine lacks."""
        if not task.has_own_image:
            self.check_catalog_user(task)
            return ResolvedImage(self.agent_image, self.agent_labels)
        with self._guard:
            lock = self._locks.setdefault(task.path, threading.Lock())
        with lock:
            if task.path not in self._resolved:
                try:
                    self._resolved[task.path] = self._resolve_own(task)
                except AgentbakeError as exc:  # every later rollout of the task fails the same, without a retry
                    self._resolved[task.path] = exc
            found = self._resolved[task.path]
        if isinstance(found, AgentbakeError):
            raise found
        return found

    def _user(self, task: Task) -> tuple[str | None, str]:
        """The agent's user a run or the task names (None: the image's own), and where it was named."""
        if self.agent_user is not None:
            return self.agent_user, "--agent-user"
        return task.agent_user, f"[agent] user in {task.path / 'task.toml'}"

    def check_catalog_user(self, task: Task) -> None:
        """A task without an image of its own runs as the catalog image's user: another one is refused."""
        user, source = self._user(task)
        if user is not None and user not in (self.agent_labels.user, str(self.agent_labels.uid)):
            raise TaskError(
                f"task {task.name}: {source} {user!r}: the task runs in the agent's image {self.agent_image}, whose "
                f"agent user is {self.agent_labels.user} (uid {self.agent_labels.uid}); another user is for tasks "
                "with an image of their own (environment/Dockerfile or [environment] docker_image): drop it or "
                "give the task one"
            )

    def _resolve_own(self, task: Task) -> ResolvedImage:
        client = self._engine()
        with self._display(task.name) as progress:
            image = task_image(
                client,
                task.name,
                environment_dir=None if task.dockerfile is None else task.dockerfile.parent,
                docker_image=task.docker_image,
                build_timeout_s=task.build_timeout_sec,
                progress=progress,
            )
        with self._display(f"{task.name} (agentbake layer)") as progress:
            user, source = self._user(task)
            runnable = runnable_image(client, task.name, image, user=user, user_source=source, progress=progress)
        with self._display(self.agent_image) as progress:
            bundle = ensure_bundle(client, self.agent_image, progress=progress)
        built = tuple(
            name
            for name, cached in (
                (image.ref, image.cached),
                (runnable.tag, runnable.cached),
                (bundle.volume, not bundle.created),
            )
            if not cached
        )
        env = dict(
            e.split("=", 1) for e in client.api.inspect_image(runnable.id)["Config"].get("Env") or [] if "=" in e
        )
        image_path = env.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        return ResolvedImage(
            ref=runnable.tag,
            labels=ImageLabels.from_labels(runnable.tag, {**self.agent_labels.to_labels(), **runnable.labels}),
            bundle=bundle.volume,
            task_image=image.ref,
            agent_path=f"{image_path}:{AGENT_BIN}",
            built=built,
            environment=environment_hash(runnable.labels, bundle.volume),
        )

    def _engine(self) -> docker.DockerClient:
        with self._guard:
            if self._client is None:
                self._client = self._client_factory()
            return self._client

    @contextlib.contextmanager
    def _display(self, what: str) -> Iterator[Progress]:
        """A progress display made only once something is built (a cached image shows nothing), closed after."""
        display = _LazyProgress(self._progress, what)
        try:
            yield display
        finally:
            display.close()


class _LazyProgress(Progress):
    def __init__(self, factory: ProgressFactory | None, what: str) -> None:
        self._factory, self._what = factory, what
        self._display: Progress | None = None

    def _get(self) -> Progress | None:
        if self._display is None and self._factory is not None:
            self._display = self._factory(self._what)
        return self._display

    def step(self, index: int, total: int, instruction: str) -> None:
        display = self._get()
        if display is not None:
            display.step(index, total, instruction)

    def output(self, line: str) -> None:
        display = self._get()
        if display is not None:
            display.output(line)

    def close(self) -> None:
        close = getattr(self._display, "close", None)
        if close is not None:
            close()
