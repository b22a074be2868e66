"""What a running rollout holds (sandbox, gateway, egress proxy) and how it is released.

This is the runner's one way to end a rollout, from its own thread or from one aborting the batch.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbake.errors import SandboxError
from agentbake.runner.sandbox import SandboxHandle

logger = logging.getLogger("agentbake.runner")


@dataclass
class LiveRollout:
    """What a running rollout holds, so an abort can remove it from another thread."""

    handle: SandboxHandle | None = None
    gateway: Any = None  # agentbake.serve.ServedApp
    runtime_dir: Path | None = None
    egress: Any = None  # agentbake.runner.network.RolloutEgress


def release(live: LiveRollout, *, strict: bool = False) -> None:
    """Kill the sandbox, stop the gateway and the egress proxy, and remove their sockets' folders.

    The sandbox is removed in a thread while the gateway stops. With `strict` a failed kill raises after the rest is
    released; without, it is logged, so an earlier error stays the one raised."""
    failures: list[Exception] = []
    handle, live.handle = live.handle, None
    gateway, live.gateway = live.gateway, None
    runtime_dir, live.runtime_dir = live.runtime_dir, None
    egress, live.egress = live.egress, None

    def remove(handle: SandboxHandle) -> None:
        try:
            handle.kill()
        except Exception as exc:
            failures.append(exc)
            logger.warning("could not remove sandbox %s: %s", handle.sandbox_id, exc)

    removal = None
    if handle is not None:
        removal = threading.Thread(target=remove, args=(handle,), name=f"remove-{handle.sandbox_id[:12]}", daemon=True)
        removal.start()
    try:
        if gateway is not None:
            with contextlib.suppress(Exception):
                gateway.stop()
        if runtime_dir is not None:
            shutil.rmtree(runtime_dir, ignore_errors=True)
        if egress is not None:
            with contextlib.suppress(Exception):
                egress.close()
    finally:
        if removal is not None:
            removal.join()
    if strict and failures and handle is not None:
        raise SandboxError(f"could not remove sandbox {handle.sandbox_id}: {failures[0]}") from failures[0]
