"""The labels on everything the runner creates, and who owns it: what `agentbake gc` reads.

The owner is `host:pid:start`, the process start time (clock ticks since boot, from /proc) telling a
live owner from a later process that got the same pid.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

ROLLOUT = "dev.agentbake.rollout"
"""The rollout id; `warm` while the sandbox waits in a warm pool. Its presence marks ours."""
OWNER = "dev.agentbake.owner"
EXPIRES = "dev.agentbake.expires"
"""Unix time (seconds) after which gc removes the sandbox whatever its owner."""
RUNTIME_DIR = "dev.agentbake.runtime-dir"
"""The sandbox's host folder (forwarder, gateway socket link), removed with it."""
WARM_ROLLOUT = "warm"
NETWORK = "dev.agentbake.network"
"""On the network sandboxes join for their verifier (shared by every runner, kept: gc leaves it)."""


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 (starttime); the name before ")" may hold spaces


def this_process() -> str:
    """This process as an owner label value."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid()) or '-'}"


def owner_alive(owner: str) -> bool | None:
    """Whether the owning process still runs; None when it runs on another host (only expiry applies)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False  # not written by us: nobody owns it
    host, pid, start = parts[0], int(parts[1]), parts[2]
    if host != socket.gethostname():
        return None
    current = _start_time(pid)
    if current is None:
        try:
            os.kill(pid, 0)  # no /proc (macOS): the pid alone
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return start == "-"
    return start in ("-", current)


def sandbox_labels(rollout_id: str, ttl_s: float, runtime_dir: Path) -> dict[str, str]:
    return {
        ROLLOUT: rollout_id,
        OWNER: this_process(),
        EXPIRES: str(int(time.time() + ttl_s)),
        RUNTIME_DIR: str(runtime_dir),
    }
