"""The model's workers: several servers of one model, each rollout pinned to one for its whole run.

Pinning keeps the server's prefix cache. A watch declares a worker failed once it stops answering, so its rollouts end
as `model_error` rather than move to another worker mid-conversation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from agentbake.errors import AgentbakeError
from agentbake.runner.model.host_gateway import list_models

if TYPE_CHECKING:
    from agentbake.gateway.config import GatewayConfig

logger = logging.getLogger("agentbake.runner")

PROBE_INTERVAL_S = 2.0
"""Seconds between two probes of a worker (`GET <url>/models`)."""
FAILED_AFTER = 3
"""Probes in a row without an answer that make a worker failed: one lost probe is a blip, three are a dead server."""


class ModelWorkerError(AgentbakeError):
    """No worker can take the rollout, or its worker failed while it ran."""


def worker_label(url: str) -> str:
    """A worker's URL as records and results name it: without credentials (`user:pass@`)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(eq=False)
class Worker:
    """One server of the model: the gateway settings its rollouts get, the rollouts on it, whether it failed."""

    gateway: GatewayConfig
    rollouts: set[str] = field(default_factory=set)
    failure: str | None = None
    """Why the worker is failed (it stays so for the runner's life); None while it answers."""
    misses: int = 0

    @property
    def label(self) -> str:
        return self.gateway.worker or self.gateway.upstream


class Workers:
    """The runner's workers, what each holds, and their watch (a daemon thread probing every worker)."""

    def __init__(self, on_failure: Callable[[Worker, list[str]], None]) -> None:
        """`on_failure(worker, rollout_ids)` is called once, from the watch, when a worker fails."""
        self._workers: list[Worker] = []
        self._lock = threading.Lock()
        self._on_failure = on_failure
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        self._turn = 0

    def use(self, gateways: list[GatewayConfig], *, watch: bool = True) -> None:
        """Replace the workers (their rollouts done) by these, and watch them (`watch`)."""
        with self._lock:
            self._workers = [Worker(gateway) for gateway in gateways]
            if watch and self._watch is None:
                self._watch = threading.Thread(target=self._run_watch, name="agentbake-model-watch", daemon=True)
                self._watch.start()

    @property
    def all(self) -> list[Worker]:
        with self._lock:
            return list(self._workers)

    def pick(self, rollout_id: str) -> Worker:
        """The worker the rollout stays on: the answering one holding the fewest rollouts (ties taken in turn)."""
        with self._lock:
            alive = [w for w in self._workers if w.failure is None]
            if not alive:
                failures = "; ".join(f"{w.label}: {w.failure}" for w in self._workers)
                raise ModelWorkerError(f"every model worker has failed ({failures}); no rollout can start")
            self._turn += 1
            worker = min(alive, key=lambda w: (len(w.rollouts), (alive.index(w) - self._turn) % len(alive)))
            worker.rollouts.add(rollout_id)
            return worker

    def done(self, rollout_id: str) -> Worker | None:
        """Take the rollout off its worker; that worker (None if it had none)."""
        with self._lock:
            for worker in self._workers:
                if rollout_id in worker.rollouts:
                    worker.rollouts.discard(rollout_id)
                    return worker
        return None

    def close(self) -> None:
        self._stop.set()

    def _run_watch(self) -> None:
        while not self._stop.wait(PROBE_INTERVAL_S):
            for worker in self.all:
                if worker.failure is None:
                    self._probe(worker)

    def _probe(self, worker: Worker) -> None:
        try:
            list_models(worker.gateway.upstream, worker.gateway.api_key_env, timeout_s=PROBE_INTERVAL_S * 5)
        except (OSError, ValueError, AttributeError) as exc:
            worker.misses += 1
            if worker.misses < FAILED_AFTER:
                return
            with self._lock:
                worker.failure = f"GET {worker.label}/models failed {FAILED_AFTER} times in a row (the last: {exc})"
                rollouts = sorted(worker.rollouts)
            logger.error("model worker %s failed: %s; its %d rollouts end", worker.label, worker.failure, len(rollouts))
            self._on_failure(worker, rollouts)
            return
        worker.misses = 0
