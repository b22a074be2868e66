"""What a proxy tells of the requests that did not go through: refusals (its policy said no) and upstream failures
(a host the policy allows could not be reached, or broke off its answer), counted per (phase, host) and logged.

Both are bounded per phase: a sandbox naming millions of hosts adds to one `(other hosts)` count, and its lines stop
at the bound, so neither the proxy's memory nor its log grows with what the sandbox sends.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

OTHER_HOSTS = "(other hosts)"
_MAX_TEXT = 300
"""Characters of a host or a reason kept (a refused name may be as long as a request head)."""


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


@dataclass(frozen=True)
class _Counted:
    """Requests of one phase to one host that did not go through (what the runner turns into result.json notes)."""

    phase: str
    host: str
    reason: str
    """The first such request's reason."""
    count: int
    verb: ClassVar[str]

    @property
    def note(self) -> str:
        """One line for result.json notes."""
        return f"network: {self.host} {self.verb} {_times(self.count)} in the {self.phase} phase ({self.reason})"


@dataclass(frozen=True)
class Refusal(_Counted):
    """Requests the phase's policy refused."""

    verb: ClassVar[str] = "refused"


@dataclass(frozen=True)
class Failure(_Counted):
    """Requests to a host the policy allows that failed upstream (name, connect, TLS, or a broken answer)."""

    verb: ClassVar[str] = "failed"


class Ledger:
    """One kind of event of one proxy (`refusal` or `failure`): a count and the first reason per (phase, host), and a
    JSON line per event in `log_path`; per phase at most `limit` hosts (the rest counted as `(other hosts)`) and
    `limit` lines."""

    def __init__(self, kind: str, limit: int, log_path: Path | None) -> None:
        self.kind = kind
        self.limit = limit
        self.log_path = log_path
        self._counts: Counter[tuple[str, str]] = Counter()
        self._reasons: dict[tuple[str, str], str] = {}
        self._hosts: Counter[str] = Counter()
        self._logged: Counter[str] = Counter()

    def record(self, phase: str, host: str, reason: str) -> None:
        host, reason = host[:_MAX_TEXT], reason[:_MAX_TEXT]
        key = (phase, host)
        if key not in self._counts:
            if self._hosts[phase] >= self.limit:
                key = (phase, OTHER_HOSTS)
            else:
                self._hosts[phase] += 1
        self._counts[key] += 1
        self._reasons.setdefault(key, reason)
        if self.log_path is not None and self._logged[phase] < self.limit:
            self._logged[phase] += 1
            line = {"time": time.time(), "kind": self.kind, "phase": phase, "host": host, "reason": reason}
            with self.log_path.open("a") as log:
                log.write(json.dumps(line) + "\n")

    def counts(self) -> list[tuple[str, str, str, int]]:
        """(phase, host, first reason, count), in the order the hosts were first seen."""
        return [(phase, host, self._reasons[(phase, host)], n) for (phase, host), n in self._counts.items()]
