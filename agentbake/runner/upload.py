"""The agent's files into the sandbox in one archive and no round trip of their own (issue 17).

The harness writes one archive as root (`tar_archive`) beside its scratch dir, with a list of what it makes in
the image user's dirs (home, workdir, the image's labelled dirs; `made_in_user_dirs`). Its first root step, the
one that makes the scratch dir, runs `unpack_command`: the directories of that list that do not exist yet are
noted, the archive is unpacked as root, then exactly those directories (with all below them: the archive's) and
the archive's files in directories that did exist are given to the user. The user owns what it would have owned
had it unpacked the archive itself (`tar -x` as the user, before issue 17), and nothing more: a directory or file
of the image in those dirs keeps its owner. Modes are masked as the user's umask (022) would. Nothing of the
agent has run yet, so root unpacks only what the task and the launch hold.
"""

from __future__ import annotations

import io
import posixpath
import shlex
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from agentbake.errors import TaskError

USER_UMASK_MODES = 0o755
"""The modes a user with umask 022 gets: what `tar -x` as the image's user made of the archive before."""


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
    """The list `unpack_command` reads: for each file inside one of `user_dirs` (the deepest that holds it; `/`
    never counts), the directories between that dir and the file (`path/`) and the file itself, a line each,
    sorted. Sorted, a directory comes first and all that is below it right after it. A name with a line break
    is a `TaskError` (the list is read line by line)."""
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


def unpack_command(archive: str, made: str, user: str) -> str:
    """Shell, as root: `archive` (which holds `made`, the list of `made_in_user_dirs`, in the root-only scratch
    dir) unpacked at / and removed; then what it made in the user's dirs given to `user` and its group: each
    directory of the list that did not exist before (recursively: all below it is the archive's) and each file
    of the list that is not below such a directory (`chown -h`: a link is never followed)."""
    quoted, listed, owned = shlex.quote(archive), shlex.quote(made), shlex.quote(f"{made}.owned")
    who = shlex.quote(user)
    # `top` ends in "/": entries below a directory found missing are covered by its recursive chown.
    note_missing = (
        f"tar -x -f {quoted} -C / {shlex.quote(made.lstrip('/'))} && top=// && "
        'while IFS= read -r p; do case $p in "$top"*) continue ;; esac; case $p in '
        '*/) [ -e "$p" ] || [ -h "${p%/}" ] || { top=$p; printf \'%s\\n\' "${p%/}"; } ;; '
        "*) printf '%s\\n' \"$p\" ;; esac; "
        f"done < {listed} > {owned}"
    )
    give = (
        f"{{ [ ! -s {owned} ] || ( IFS=\"$(printf '\\n_')\" && IFS=${{IFS%_}} && set -f && "
        f'chown -hR -- "$(id -u {who}):$(id -g {who})" $(cat {owned}) ); }}'
    )
    return f"{note_missing} && tar -x -f {quoted} -C / && {give} && rm -f -- {quoted} {listed} {owned}"
