"""A local Ray cluster per test module: a head and two worker nodes (`ray start` processes on this machine), each
advertising the rollout resource and its own `node:<label>`, all on the one machine-wide Docker engine."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("ray")

RAY = Path(sys.executable).with_name("ray")
ROOT = Path(__file__).resolve().parents[3]
NODES = ("w0", "w1", "w2")  # w0 is the head
SLOTS = 2


@dataclass(frozen=True)
class LocalCluster:
    address: str
    temp_dir: Path
    env: dict[str, str]

    def raylet(self, label: str) -> int:
        """The pid of node `label`'s raylet."""
        for pid in _pids_of(self.temp_dir):
            args = _cmdline(pid)
            if args and args[0].endswith("/raylet") and any(f"node:{label},1" in arg for arg in args):
                return pid
        raise AssertionError(f"no raylet of node {label}")


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _pids_of(temp_dir: Path) -> list[int]:
    """This cluster's processes: those whose command line names its temp dir (the raylets' workers included)."""
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and any(str(temp_dir) in arg for arg in _cmdline(int(entry)))
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    # A short path: Ray's unix sockets live under it.
    temp_dir = Path(tempfile.mkdtemp(prefix="abray-", dir="/tmp"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    port = _free_port()
    common = ["--num-cpus", "1", "--object-store-memory", str(100 * 1024**2), "--disable-usage-stats"]

    try:
        for label in NODES:  # one after the other: two nodes joining at once from one machine can race
            resources = json.dumps({"agentbake_docker": SLOTS, f"node:{label}": 1})
            where = ["--head", "--port", str(port), "--include-dashboard=false"] if label == "w0" else []
            where = where or ["--address", f"127.0.0.1:{port}"]
            started = subprocess.run(
                [str(RAY), "start", *where, *common, "--temp-dir", str(temp_dir), "--resources", resources],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert started.returncode == 0, started.stderr
        yield LocalCluster(f"127.0.0.1:{port}", temp_dir, env)
    finally:
        for _ in range(3):  # a worker may start while the others die
            for pid in _pids_of(temp_dir):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        shutil.rmtree(temp_dir, ignore_errors=True)
