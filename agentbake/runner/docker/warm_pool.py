"""Started sandboxes kept ready per (image, bundle, limits), so `create` only hands one out.

A pooled container is labelled `dev.agentbake.rollout=warm` and gets its gateway socket when taken. Request
variables go on each command, never the container, so any pooled one fits.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait

from agentbake.runner.docker import labels
from agentbake.runner.docker.engine import DockerEngine, ImageInfo, Limits

Key = tuple[str, str | None, Limits]
"""Image id, agent bundle, limits: the sandboxes one key holds are interchangeable."""


class WarmPool:
    """Keeps `size` started containers per key; refills in background threads."""

    def __init__(self, engine: DockerEngine, size: int):
        self._engine = engine
        self.size = size
        self._ready: dict[Key, deque[tuple[str, str]]] = {}
        self._pending: dict[Key, set[Future[None]]] = {}
        self._lock = threading.RLock()  # a future done at once runs its callback under the lock
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self.errors: list[Exception] = []
        """Failures of background starts (the next `create` starts its own container instead)."""

    def take(self, image: ImageInfo, limits: Limits) -> tuple[str, str] | None:
        """A ready (container id, name) for this image and limits, or None; starts a replacement."""
        if self.size == 0:
            return None
        key = (image.id, image.bundle, limits)
        with self._lock:
            ready = self._ready.setdefault(key, deque())
            taken = ready.popleft() if ready else None
        self._refill(key, image, limits)
        return taken

    def fill(self, image: ImageInfo, limits: Limits) -> None:
        """Start containers up to the pool's size for this key and wait until every start under way ran."""
        key = (image.id, image.bundle, limits)
        self._refill(key, image, limits)
        with self._lock:
            pending = list(self._pending.get(key, ()))
        wait(pending)

    def _refill(self, key: Key, image: ImageInfo, limits: Limits) -> None:
        with self._lock:
            if self._closed:
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agentbake-warm")
            pending = self._pending.setdefault(key, set())
            while len(self._ready.get(key, ())) + len(pending) < self.size:
                future = self._executor.submit(self._start_one, key, image, limits)
                pending.add(future)
                future.add_done_callback(lambda done, pending=pending: self._forget(pending, done))

    def _forget(self, pending: set[Future[None]], done: Future[None]) -> None:
        with self._lock:
            pending.discard(done)

    def _start_one(self, key: Key, image: ImageInfo, limits: Limits) -> None:
        try:
            started = self._engine.start_container(image, limits, labels.WARM_ROLLOUT)
        except Exception as exc:
            with self._lock:
                self.errors.append(exc)
            return
        with self._lock:
            if not self._closed:
                self._ready.setdefault(key, deque()).append(started)
                return
        self._engine.discard(started[1])

    def close(self) -> None:
        """Stop refilling, wait for starts under way, remove every container still waiting."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            waiting = [name for ready in self._ready.values() for _, name in ready]
            self._ready.clear()
        if waiting:
            with ThreadPoolExecutor(max_workers=4) as removers:
                wait([removers.submit(self._engine.discard, name) for name in waiting])
