"""What this test process holds while an attack runs: the peak of its resident memory and open descriptors.

The runner (and each rollout's gateway) runs inside the test process, so its peaks are what an attack from a
sandbox cost the runner. Sampled every 10 ms from a thread."""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType

MiB = 1024 * 1024


def resident_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


class Peak:
    """`with Peak() as peak: ...` then `peak.added_mib`, `peak.added_fds` (above what was held at the start)."""

    def __init__(self) -> None:
        self._rss_before = self._rss = resident_bytes()
        self._fds_before = self._fds = open_descriptors()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            self._rss, self._fds = max(self._rss, resident_bytes()), max(self._fds, open_descriptors())
            time.sleep(0.01)

    @property
    def added_mib(self) -> float:
        return (self._rss - self._rss_before) / MiB

    @property
    def added_fds(self) -> int:
        return self._fds - self._fds_before

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()
