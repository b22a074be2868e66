"""The workdir's snapshot before the agent and its diff after, as root shell commands with a private git dir.

The agent's files are hostile here too: the snapshot unsets every `.gitattributes` setting, leaves out files over
MAX_DIFF_FILE_MB, and a workdir removed or replaced by a link is made again, empty.
"""

from __future__ import annotations

import base64
import binascii
import shlex

MAX_DIFF_BYTES = 16 * 1024 * 1024
"""The workdir diff is cut at this size."""
MAX_DIFF_FILE_MB = 16
"""Files larger than this (apparent size) are left out of the snapshot and the diff (a diff of one would pass
MAX_DIFF_BYTES anyway)."""
MAX_PRINTED_DIFF_BYTES = 1024 * 1024
"""A diff up to this size is printed by the command that made it (`print_diff_command`): no file read of its own
(an archive round trip); a larger one is read from its file. Its base64 stays well inside the first
half of a command's kept output (`sandbox/output.py`)."""
_ATTRIBUTES = "* !diff !text !eol !crlf !ident !filter !working-tree-encoding"
RECREATED = "recreated"


def _git(private: str, workdir: str, git: str) -> str:
    """git on the private git dir: the workdir's own `.git` config is never read and no hook runs."""
    return f"{git} --git-dir={private}/snapshot.git --work-tree={shlex.quote(workdir)} -c core.hooksPath=/dev/null"


def _stage(private: str, workdir: str, git: str) -> str:
    """Stage the workdir, ignored files too, but files over MAX_DIFF_FILE_MB. Only what BusyBox's find has too
    (`-size` in k, `-exec {} +`): a task image may not have GNU findutils."""
    spec = f"{private}/pathspec"
    big = f"find . -xdev -type f -size +{MAX_DIFF_FILE_MB * 1024}k -exec printf ':(exclude,literal)%s\\0' {{}} +"
    return (
        f"{{ printf '.\\0'; {big}; }} > {spec} && "
        f"{_git(private, workdir, git)} add --all --force --pathspec-from-file={spec} --pathspec-file-nul"
    )


def snapshot_command(private: str, workdir: str, git: str = "git") -> str:
    """Commit the workdir as the agent will find it (`git`: the git to run, `handle.git`)."""
    command = _git(private, workdir, git)
    return (
        f"{command} init -q && echo '{_ATTRIBUTES}' > {private}/snapshot.git/info/attributes && "
        f"{_stage(private, workdir, git)} && "
        f"{command} -c user.name=agentbake -c user.email=agentbake@localhost commit -q --allow-empty -m start"
    )


def diff_command(private: str, workdir: str, out: str, git: str = "git") -> str:
    """Write the workdir's diff against the snapshot to `out`, cut at MAX_DIFF_BYTES."""
    return (
        f"{_stage(private, workdir, git)} && "
        f"{_git(private, workdir, git)} diff --cached --no-color --no-ext-diff --no-textconv"
        f" | head -c {MAX_DIFF_BYTES} > {out}"
    )


def restore_command(workdir: str, uid: str) -> str:
    """Make a workdir that is gone, no directory, or a link, again: empty, the agent's; prints RECREATED then."""
    quoted = shlex.quote(workdir)
    return (
        f"if [ -L {quoted} ] || [ ! -d {quoted} ]; then rm -f {quoted} && mkdir {quoted} && "
        f"chown {uid} {quoted} && echo {RECREATED}; fi"
    )


def print_diff_command(out: str) -> str:
    """Shell that prints the diff as one line `inline <size> <base64>` when it is small enough. It never fails;
    `printed_diff` refuses anything short."""
    quoted = shlex.quote(out)
    return (
        f'size=$(wc -c < {quoted}) && [ "$size" -le {MAX_PRINTED_DIFF_BYTES} ] && '
        f"{{ printf 'inline %s ' \"$size\"; base64 < {quoted} | tr -d '\\n'; echo; }}; true"
    )


def printed_diff(line: str) -> bytes | None:
    """The diff from `print_diff_command`'s line, or None when the line is not whole (then read the file)."""
    _, size, encoded = f"{line}  ".split(" ", 2)
    try:
        diff = base64.b64decode(encoded.strip(), validate=True)
    except binascii.Error:
        return None
    return diff if size.isdigit() and len(diff) == int(size) else None
