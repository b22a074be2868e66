"""Log paths packed by a root command that runs anyway, so collecting them costs no archive round trip.

Each copy through a backend's file API is a round trip (Docker: ~50-100 ms). So the stop step packs the agent's log
paths, and the verifier's last command packs its log dir. `PackedLogs.pack` is the shell they end with: a root `tar`
printed in base64 when at most MAX_PACKED_BYTES.

`SandboxHandle.copy_out_all` extracts a printed archive with the same caps and notes as a backend's copy. Other paths go
through the backend's file API. A path with a link the agent made on its way is not collected, with a note, since the
backend's copy would follow it.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from agentbake.runner.sandbox.copyout import CopyBudget, extract

MAX_PACKED_BYTES = 2 * 1024 * 1024
"""Archive bytes printed at most per path (a larger one is left to the backend's copy). Two paths' base64 and the
diff printed before them (`workdir.MAX_PRINTED_DIFF_BYTES`) fit in a command's kept output (`sandbox/output.py`),
one path's and the reward lines before it in its last half."""
# $1: a path (absolute, normalized), $2: its parent, $3: its name, $4: its index; $f: a name in the scratch dir.
# Prints `absent` (nothing there), `linked` (a link the agent made on its way: of another owner than root, or
# changed after the agent started, $m, whoever owns it: a root agent's), `-` (root's link on its way, the image's:
# left to the backend) or `+<base64>`, then ` -` when tar failed. Few
# processes (tar, head, base64, tr): each costs a few ms in a loaded sandbox.
_PACK_ONE = rf"""older() {{  # $1 changed (ctime) before the agent started ($m, `@<seconds>`; none: always)
  [ -z "$m" ] || [ "$(find "$1" -maxdepth 0 ! -newerct "$m" 2>/dev/null)" = "$1" ]
}}
pack() {{
  q=$1
  while [ -n "$q" ]; do
    [ ! -L "$q" ] || {{ [ "$(stat -c %u -- "$q")" = 0 ] && older "$q" && echo - || echo linked; return; }}; q=${{q%/*}}
  done
  [ -e "$1" ] || {{ echo absent; return; }}
  printf +
  {{ tar --sort=name -C "$2" -cf - -- "$3" 2>/dev/null || : > "$f.$4"; }} | head -c {MAX_PACKED_BYTES + 1} |
    base64 | tr -d '\n'
  [ ! -e "$f.$4" ] || printf ' -'
  echo
}}
"""


@dataclass(frozen=True)
class Refused:
    """A log path not collected at all: `copy_out_all` notes `reason` and copies nothing."""

    reason: str


THROUGH_AGENT_LINK = Refused("it is, or passes through, a link the agent made (links are never followed)")
"""A log path with a link of the agent's on its way: the backend's copy would follow a link in its parent folders
(Docker's archive API resolves them), so the agent could point the harness at any folder of the sandbox."""

Packed = bytes | Refused | None
"""A log path as its root command saw it: its archive, refused, or None when nothing was there."""

NONE_PACKED: Mapping[str, Packed] = MappingProxyType({})
"""`SandboxHandle.copy_out_all`'s default: no path packed, each copied by the backend."""


@dataclass
class PackedLogs:
    """The log paths the rollout's root commands packed, by path: the archive, `THROUGH_AGENT_LINK`, or None when
    nothing was there. A path that is not here is copied by the backend (`SandboxHandle.copy_out_all`)."""

    scratch: str
    """The harness's root-only scratch dir, where an archive is made before it is printed."""
    since: str = ""
    """When the agent started, as `@<seconds>` ctime. A link on a log path changed after it is the agent's, whoever owns
    it, so a root agent's links are refused too. Empty: only the owner tells."""
    archives: dict[str, Packed] = field(default_factory=dict)

    def pack(self, paths: Sequence[str]) -> str:
        """Shell for the part of a root command that runs once `paths` are final (`harness/commands.py`): one line
        per path (`_PACK_ONE`), for `take`."""
        calls = []
        for index, path in enumerate(paths):
            parent, name = posixpath.split(posixpath.normpath(path))
            usable = posixpath.isabs(path) and name not in ("", "..")
            args = [posixpath.normpath(path), parent, name, str(index)]
            calls.append(f"pack {shlex.join(args)}" if usable else "echo -")
        marker = f"m={shlex.quote(self.since)}\n"
        return f"{_PACK_ONE}f={shlex.quote(self.scratch)}/pack-failed\n{marker}" + "\n".join(calls)

    def take(self, printed: str | None, paths: Sequence[str]) -> None:
        """Keep the archives in what `pack(paths)` printed (None: it did not run).

        A line cut in its middle leaves its path to the backend's copy."""
        answers = (printed or "").splitlines()
        if len(answers) == len(paths):
            for path, answer in zip(paths, answers, strict=True):
                if answer == "absent":
                    self.archives[path] = None
                elif answer == "linked":
                    self.archives[path] = THROUGH_AGENT_LINK
                elif (archive := _archive(answer)) is not None:
                    self.archives[path] = archive


def _archive(line: str) -> bytes | None:
    """The archive a `+<base64>` line holds, or None when the line is anything else or its archive is not whole."""
    if not line.startswith("+"):
        return None
    try:
        archive = base64.b64decode(line[1:], validate=True)
    except binascii.Error:
        return None
    whole = len(archive) <= MAX_PACKED_BYTES and len(archive) % 512 == 0 and archive.endswith(bytes(1024))
    return archive if whole else None


def extract_packed(archive: Packed, dest: Path, budget: CopyBudget, *, source: str) -> None:
    """`extract` of an archive a command printed, as of one the backend streams.

    None: nothing was at `source`. `Refused`: its reason is a note."""
    if isinstance(archive, Refused):
        budget.note(f"{source}: not collected: {archive.reason}")
    elif archive is not None:
        extract([archive], dest, budget, source=posixpath.normpath(source))
