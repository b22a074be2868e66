"""The agent's files into the sandbox as one archive, with no round trip of their own.

The first root step unpacks the archive as root and gives the user exactly what a `tar -x` of its own would have
made; modes are masked by umask 022. A small archive rides in that command's environment (`hand_over`), unset before
anything else runs. A larger one, or on a backend without `Capabilities.large_exec_env`, is written as a root-only
file first. The verifier's tests/ travel the same way.
"""

from __future__ import annotations

import base64
import io
import posixpath
import shlex
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentbake.errors import TaskError
from agentbake.runner.sandbox import SandboxHandle

USER_UMASK_MODES = 0o755
"""The modes a user with umask 022 gets: what `tar -x` as the image's user made of the archive before."""
ENV_ARCHIVE_MAX = 512 * 1024
"""Largest archive (bytes) handed to the command that unpacks it in that command's environment; a larger one is
written as a file first (one archive write more: ~50 ms on Docker 20.10). Base64 makes it 683 KiB of
environment, well inside Linux's 2 MiB for a command's arguments and environment together (ARG_MAX, with the
default 8 MiB stack), with room for the sandbox's own variables. A task's files are a few KiB as a rule."""
ENV_CHUNK = 96 * 1024
"""Base64 characters per variable: one `NAME=value` string may hold at most 128 KiB (MAX_ARG_STRLEN)."""
ENV_PREFIX = "AGENTBAKE_ARCHIVE_"
"""The variables an archive rides in: `AGENTBAKE_ARCHIVE_0`, `_1`, ..."""
_NO_BASE64 = (
    "command -v base64 >/dev/null 2>&1 || { echo 'agentbake: the sandbox has no base64 command (coreutils), which "
    "decodes the files the harness hands it; install coreutils in the image' >&2; false; }"
)


@dataclass(frozen=True)
class HandedArchive:
    """An archive as the one command that unpacks it finds it: in `envs` (to give that command only), or in a
    root-only file written before. `ready`, `read`, `forget`: shell for that command (`unpack` chains them)."""

    read: str
    """Prints the archive on stdout (may run more than once)."""
    forget: str
    """Unsets the variables (before any other code runs in the command: nothing it starts inherits them), or
    removes the file."""
    ready: str = "true"
    """Fails, saying what is missing, when the sandbox cannot read the archive (no `base64`)."""
    envs: Mapping[str, str] = field(default_factory=dict)
    """The environment the archive rides in; empty when it was written as a file."""

    def extract(self, *members: str) -> str:
        """Shell: the archive's `members` (all when none) unpacked at /."""
        return f"{self.read} | tar -x -f - -C / {shlex.join(members)}".rstrip()

    def unpack(self) -> str:
        """Shell: the whole archive unpacked at / and forgotten."""
        return f"{self.ready} && {self.extract()} && {self.forget}"


def hand_over(handle: SandboxHandle, archive: bytes, path: str, *, in_env: bool) -> HandedArchive:
    """`archive` for the command that unpacks it: in its environment when `in_env` and small enough
    (`ENV_ARCHIVE_MAX`), else written now to `path` (root's, mode 0600)."""
    if in_env and len(archive) <= ENV_ARCHIVE_MAX:
        text = base64.b64encode(archive).decode()
        envs = {f"{ENV_PREFIX}{n}": text[at : at + ENV_CHUNK] for n, at in enumerate(range(0, len(text), ENV_CHUNK))}
        joined = " ".join(f'"${name}"' for name in envs)
        return HandedArchive(f"printf %s {joined} | base64 -d", f"unset {' '.join(envs)}", _NO_BASE64, envs)
    handle.write_bytes(path, archive, mode=0o600, user="root")
    quoted = shlex.quote(path)
    return HandedArchive(f"cat -- {quoted}", f"rm -f -- {quoted}")


def tar_archive(files: Mapping[str, bytes | Path], *, mode_mask: int = 0o7777) -> bytes:
    """An archive of files by absolute sandbox path: host files keep their mode, contents given as bytes get
    0600, both within `mode_mask`. Owner 0: root unpacks it as root's, the image's user as its own (tar's
    defaults)."""

    def owned_by_extractor(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode &= mode_mask
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, source in sorted(files.items()):
            if isinstance(source, Path):
                tar.add(source, arcname=path.lstrip("/"), recursive=False, filter=owned_by_extractor)
            else:
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode = len(source), 0o600
                tar.addfile(owned_by_extractor(info), io.BytesIO(source))
    return buffer.getvalue()


def made_in_user_dirs(files: Mapping[str, bytes | Path], user_dirs: Iterable[str]) -> str:
    """The list `unpack_command` reads: per file in `user_dirs`, the directories down to it and the file, sorted. A
    name with a line break is a `TaskError`: the list is read line by line."""
    dirs = [d.rstrip("/") for d in user_dirs if d.rstrip("/")]
    made: set[str] = set()
    for path, source in files.items():
        if "\n" in path:
            named = source if isinstance(source, Path) else repr(path)
            raise TaskError(f"{named}: a file name with a line break; rename it (the agent's files are listed by line)")
        holding = [d for d in dirs if path.startswith(d + "/")]
        if not holding:
            continue
        top = max(holding, key=len)
        parts = path[len(top) + 1 :].split("/")
        made.update(posixpath.join(top, *parts[:depth]) + "/" for depth in range(1, len(parts)))
        made.add(path)
    return "".join(f"{entry}\n" for entry in sorted(made))


def unpack_command(archive: HandedArchive, made: str, user: str) -> str:
    """Shell, as root: unpack `archive` at /, then give the user what it made in the user's dirs. New directories go
    whole, existing ones keep their owner; `chown -h` never follows a link."""
    listed, owned = shlex.quote(made), shlex.quote(f"{made}.owned")
    who = shlex.quote(user)
    # `top` ends in "/": entries below a directory found missing are covered by its recursive chown.
    note_missing = (
        f"{archive.extract(made.lstrip('/'))} && top=// && "
        'while IFS= read -r p; do case $p in "$top"*) continue ;; esac; case $p in '
        '*/) [ -e "$p" ] || [ -h "${p%/}" ] || { top=$p; printf \'%s\\n\' "${p%/}"; } ;; '
        "*) printf '%s\\n' \"$p\" ;; esac; "
        f"done < {listed} > {owned}"
    )
    give = (
        f"{{ [ ! -s {owned} ] || ( IFS=\"$(printf '\\n_')\" && IFS=${{IFS%_}} && set -f && "
        f'chown -hR -- "$(id -u {who}):$(id -g {who})" $(cat {owned}) ); }}'
    )
    return (
        f"{archive.ready} && {note_missing} && {archive.extract()} && {archive.forget} && {give} && "
        f"rm -f -- {listed} {owned}"
    )
