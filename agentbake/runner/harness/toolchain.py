"""What the verifier runs, checked for the agent's changes before test.sh runs (shared mode).

Right before the agent starts, the snapshot step records a marker's ctime and the list of watched paths
(`baseline_part`). Once the agent is dead, `check_part` lists every watched entry newer than the marker, and `judge`
withholds the reward for any that dpkg or pip does not explain. The rules and their limits are the threat model in
README.md.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
"""The directories of root's PATH, where test.sh finds its commands."""
LIB_DIRS = (
    *("/lib", "/lib32", "/lib64", "/libx32"),
    *("/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32", "/usr/local/lib"),
)
"""Shared libraries, the loader, and the modules of Python, Perl and Node (all below these)."""
ETC_PATHS = (
    "/etc/ld.so.preload",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ld.so.cache",
    "/etc/python3*",
    "/etc/alternatives",
    "/etc/environment",
    "/etc/default/locale",
)
"""The loader's settings, the system Python's startup files, the alternatives' links. PAM's files are not watched
(installing a package rewrites `/etc/pam.d/common-*` through pam-auth-update, outside dpkg's sums), so a test.sh
that switches users with `su`/`runuser` is not covered; nor are `/etc/profile*` and `bash.bashrc`: `bash
/tests/test.sh` reads neither (not a login shell, not interactive)."""
OTHER_PATHS = ("/usr/share/perl5", "/usr/share/perl", '"$HOME"/.local/lib')
"""Perl's modules outside /usr/lib, root's Python user site (its `.pth` files and `usercustomize` run for root)."""
ROOTS = (*PATH_DIRS, *LIB_DIRS, *OTHER_PATHS, *ETC_PATHS)
_TAB = "\t"
_HOOK_DIRS = ("/etc/ld.so.", "/etc/python3", "/etc/environment", "/etc/default/locale")

# Extended regexes without a backslash (`[.]`), like those awk gets with -v (which reads one as an escape).
_INTERPRETERS = "(python3?([.][0-9]+)?|bash|sh|dash|perl|node|nodejs|pytest|py[.]test|uv|uvx|curl|git|env)"
_LOADER = "(libc[.]so[.]6|ld-linux[^/]*[.]so[.][0-9]+|libpython3[^/]*[.]so[^/]*)"
_LOCALE_LINE = r'^[ \t]*(export[ \t]+)?(LANG|LANGUAGE|LC_[A-Z]+)=("[A-Za-z0-9_.@:-]*"|[A-Za-z0-9_.@:-]*)[ \t]*$'
"""A line of `/etc/default/locale` that names a locale and nothing else (no path, no other variable)."""
_GONE = f"^(({'|'.join(PATH_DIRS)})/{_INTERPRETERS}|({'|'.join(LIB_DIRS)})/([^/]+/)*{_LOADER})$"
"""Watched files whose removal is flagged (other removals are an upgrade's or a package's removal)."""

_ROOTS_AS_ARGS = (
    "set --\nfor r in " + " ".join(r if "*" in r or "$" in r else shlex.quote(r) for r in ROOTS) + "; do\n"
    '  [ -e "$r" ] || [ -L "$r" ] && set -- "$@" "$r"\ndone\n'
)
"""Shell: the watched roots that exist as the arguments ($@; in a subshell of its own: $1 is the caller's)."""

_JUDGE = r"""
function base(p) { sub(/.*\//, "", p); return p }
function top(p,   t) {
  if (match(p, /\/(site|dist)-packages\/[^\/]+/) || match(p, /^\/usr(\/local)?\/lib\/python3[.0-9]*\/[^\/]+/)) {
    t = substr(p, RSTART, RLENGTH); sub(/.*\//, "", t)
  } else return ""
  if (t ~ /\.(dist|egg)-info$/ || t ~ /\.pth$/ || t == "__pycache__" || t ~ /-packages$/) return ""
  sub(/\..*/, "", t); return t
}
function pathdir(p) { return p ~ PATHRE }
function libfile(p) { return p ~ LIBRE && base(p) ~ /\.so/ }
function add(path, md5,   q) {
  known[path] = known[path] " " md5 " "
  if (path ~ /^\/(s?bin|lib|lib32|lib64|libx32)\//) known["/usr" path] = known["/usr" path] " " md5 " "
}
function fresh_lists(   f, line) {  # the files of packages (re)installed since the marker
  while ((getline f < FRESH) > 0) {
    while ((getline line < f) > 0) {
      fresh[line] = 1; if (line ~ /^\/(s?bin|lib|lib32|lib64|libx32)\//) fresh["/usr" line] = 1
    }
    close(f)
  }
}
function locale_only(p,   line, bad) {  # what PAM reads of it: locale names only (a missing file: nothing)
  while ((getline line < p) > 0)
    if (line !~ /^[ \t]*(#.*)?$/ && line !~ LOCALE_LINE) bad = 1
  close(p); return !bad
}
function imports(p,   line, found) {  # a .pth line Python's site runs
  while ((getline line < p) > 0) if (line ~ /^import[ \t]/) found = 1
  close(p); return found
}
S == "sums" { add("/" substr($0, 35), substr($0, 1, 32)); next }
S == "status" && /^ \// { split($0, a, " "); add(a[1], a[2]); next }
S == "base" {
  had[$0] = 1
  next
}
S == "links" { i = index($0, "\t"); tgt[substr($0, 1, i - 1)] = substr($0, i + 1); next }
S == "recorded" { rec[$0] = 1; next }
S == "alternatives" { alt[$0] = 1; next }
S == "newer" && $0 == "oddname" { print "oddname -"; next }
S == "newer" && substr($0, 3, 1) != " " {  # md5sum's line: "<md5>  <path>" (an escaped name starts with "\")
  if (substr($0, 33, 2) == "  ") sum[substr($0, 35)] = substr($0, 1, 32)
  next
}
S == "newer" {  # find's line: "<type><target's type> <path>"
  n++; kind[n] = substr($0, 1, 2); path[n] = substr($0, 4); newer[path[n]] = 1
}
END {
  if (!n) exit
  for (q in had) {  # the names the image had: commands, libraries, top-level Python modules
    if (pathdir(q)) cmd[base(q)] = 1
    if (libfile(q)) lib[base(q)] = 1
    t = top(q); if (t != "") py[t] = 1
  }
  fresh_lists()
  for (i = 1; i <= n; i++) {
    p = path[i]; y = substr(kind[i], 1, 1)
    ok[p] = (y == "f" && sum[p] != "" && index(known[p], " " sum[p] " ")) || \
      (y == "l" && (p in fresh) && (p in tgt) && sum[p] != "" && index(known[tgt[p]], " " sum[p] " ")) || \
      (y == "l" && (p in alt) && (tgt[p] in fresh) && sum[p] != "" && index(known[tgt[p]], " " sum[p] " ")) || \
      (p == "/etc/default/locale" && locale_only(p)) || \
      (p == "/etc/ld.so.cache" && CACHE == "same")
  }
  for (i = 1; i <= n; i++) {
    p = path[i]; if (ok[p]) continue
    src = ""
    if (p ~ /\/__pycache__\/[^\/]+\.pyc$/) {  # its source: the module's name (up to the first dot) and .py
      src = p; sub(/\/__pycache__\/.*/, "", src); src = src "/" base(p); sub(/\.[^\/]*$/, ".py", src)
    }
    if (src != "" && (src in newer) && ok[src]) continue  # recompiled after its package's upgrade
    if (p in had) { print "changed " p; continue }
    if (src != "" && (src in had)) { print "bytecode " p; continue }
    b = base(p)
    if (b ~ /^(sitecustomize|usercustomize)\./ || (kind[i] == "ff" && p ~ /\.pth$/ && !(p in rec) && imports(p))) {
      print "hook " p; continue
    }
    hooked = 0; for (j = 1; j <= nhook; j++) if (index(p, hooks[j]) == 1) hooked = 1
    if (hooked) { print "hook " p; continue }
    if ((pathdir(p) && (b in cmd)) || (libfile(p) && (b in lib))) { print "shadows " p; continue }
    t = top(p); if (t != "" && (t in py)) print "shadows " p
  }
}
"""


@dataclass(frozen=True)
class Baseline:
    """What the snapshot step recorded before the agent started: the marker's ctime and the md5 of the watched entries'
    list."""

    since: str
    md5: str


@dataclass(frozen=True)
class Finding:
    """One watched entry the agent changed and nothing explains."""

    kind: str
    """`changed`, `hook`, `shadows`, `bytecode`, `gone`, `oddname`, `tampered`, or `unchecked` (the check could not
    run)."""
    path: str


_WHAT = {
    "changed": "changed",
    "hook": "a startup hook",
    "shadows": "a new file taking a name the image had",
    "bytecode": "new compiled code of a module the image had",
    "gone": "removed",
    "oddname": "a name holding a newline, tab or backslash",
}


def baseline_part(private: str) -> str:
    """Shell, as root right before the agent: touch the marker, print its ctime and the watched list's md5. Prints
    `unchecked <why>` without GNU find or stat; never fails the command."""
    marker, listed, named = (f"{private}/toolchain-{name}" for name in ("since", "baseline", "named"))
    return (
        f"(\n{_ROOTS_AS_ARGS}"
        f": > {marker} && since=$(stat -c %.9Z {marker}) && case $since in *.*) ;; *) false ;; esac &&\n"
        f'find "$@" -xdev ! -type d -print > {listed} &&\n'
        f"{{ grep -E {shlex.quote(_GONE)} {listed} > {named}; [ $? -lt 2 ]; }} &&\n"
        f'md5=$(cat {listed} {named} | md5sum) && echo "since $since" && echo "md5 ${{md5%% *}}"\n'
        ") || echo 'unchecked no GNU find, grep, stat and md5sum in the sandbox'"
    )


def parse_baseline(printed: str) -> Baseline | str:
    """The baseline the snapshot step printed, or why there is none."""
    fields = dict(line.split(" ", 1) for line in printed.splitlines() if " " in line)
    if "since" in fields and "md5" in fields:
        return Baseline(fields["since"].strip(), fields["md5"].strip())
    return fields.get("unchecked", "the snapshot step printed no baseline").strip()


def check_part(private: str, baseline: Baseline) -> str:
    """Shell, as root once the agent is dead: one `<kind> <path>` line per unexplained change. Prints `tampered -` or
    `unchecked <why>` when it cannot judge; never fails the command."""
    work, listed, named = (f"{private}/toolchain{name}" for name in ("", "-baseline", "-named"))
    since, md5 = shlex.quote(baseline.since), shlex.quote(baseline.md5)
    return f"""(
{_ROOTS_AS_ARGS}w={work} && mkdir -p "$w" && cd / || {{ echo 'unchecked no scratch dir'; exit 0; }}
sum=$(cat {listed} {named} 2>/dev/null | md5sum) && [ "${{sum%% *}}" = {md5} ] || {{ echo 'tampered -'; exit 0; }}
while IFS= read -r p; do [ -e "$p" ] || [ -L "$p" ] || echo "gone $p"; done < {named}
nl='
' tab='{_TAB}'
find "$@" -xdev ! -type d -newerct "@"{since} \\( \\( -path "*$nl*" -o -path "*$tab*" -o -path '*\\\\*' \\) \\
  \\( -name '*.pth' -o -path '*python*' -o -path '*-packages*' \\) -printf 'oddname\\n' -o \\
  ! \\( -path "*$nl*" -o -path "*$tab*" -o -path '*\\\\*' \\) -printf '%y%Y %p\\n' \\) \\
  -xtype f -exec md5sum -- {{}} + > "$w/newer" 2>/dev/null \\
  || [ -s "$w/newer" ] || {{ echo 'unchecked find failed'; exit 0; }}
[ -s "$w/newer" ] || exit 0
cache=; links=; alternatives=
while IFS= read -r line; do
  case $line in
  f?" /etc/ld.so.cache") ldconfig -X -C "$w/ld.so.cache" 2>/dev/null && a=$(md5sum < "$w/ld.so.cache") \\
    && b=$(md5sum < /etc/ld.so.cache) && [ "$a" = "$b" ] && cache=same ;;
  l?" "*) p=${{line#* }}; t=$(readlink -f -- "$p") && case $t in
    *[[:cntrl:]\\\\]*) ;; *) links="$links$p$tab$t$nl" ;; esac
    case $p in /etc/alternatives/*) d=$(readlink -- "$p") &&
      grep -qsxF -- "$d" "/var/lib/dpkg/alternatives/${{p##*/}}" && alternatives="$alternatives$p$nl" ;; esac ;;
  esac
done < "$w/newer"
printf %s "$links" > "$w/links"
printf %s "$alternatives" > "$w/alternatives"
while IFS= read -r line; do  # a new .pth that a package's RECORD in its folder names (pip wrote it)
  case $line in f?" "*.pth) p=${{line#* }}
    grep -qsF -- "${{p##*/}}," "${{p%/*}}"/*.dist-info/RECORD && echo "$p" ;; esac
done < "$w/newer" > "$w/recorded"
set -- /var/lib/dpkg/info/*.md5sums; [ -e "$1" ] || set --
[ -f /var/lib/dpkg/status ] && set -- "$@" S=status /var/lib/dpkg/status
find /var/lib/dpkg/info -name '*.list' -newerct "@"{since} > "$w/fresh" 2>/dev/null
awk -v PATHRE={shlex.quote(_dirs_re(PATH_DIRS))} -v LIBRE={shlex.quote(_dirs_re(LIB_DIRS, nested=True))} \\
  -v CACHE="$cache" -v FRESH="$w/fresh" -v HOOKS={shlex.quote(" ".join(_HOOK_DIRS))} \\
  -v LOCALE_LINE={shlex.quote(_LOCALE_LINE)} \\
  'BEGIN {{ nhook = split(HOOKS, hooks, " ") }}'{shlex.quote(_JUDGE)} \\
  S=sums "$@" S=base {listed} S=links "$w/links" S=recorded "$w/recorded" S=alternatives "$w/alternatives" \\
  S=newer "$w/newer" \\
  || echo 'unchecked the check failed'
)"""


def _dirs_re(dirs: tuple[str, ...], *, nested: bool = False) -> str:
    """An extended regex of a path directly in one of `dirs` (`nested`: at any depth below one)."""
    alternatives = "|".join(dirs)  # no regex metacharacters in them
    return f"^({alternatives})/{'' if not nested else '([^/]+/)*'}[^/]+$"


def parse_findings(printed: str) -> list[Finding]:
    """The check's lines as findings (the first 1,000; one per line, in the order the check printed them)."""
    findings = []
    for line in printed.splitlines()[:1000]:
        kind, _, path = line.partition(" ")
        if kind:
            findings.append(Finding(kind, path))
    return findings


def describe(findings: list[Finding], *, most: int = 8) -> str:
    """Why the reward is withheld, naming the first `most` entries."""
    if any(f.kind == "tampered" for f in findings):
        return "the agent changed the harness's record of the verifier's toolchain; the verifier did not run"
    named = [f"{f.path} ({_WHAT.get(f.kind, f.kind)})" for f in findings if f.kind in _WHAT][:most]
    more = len(findings) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more > 0 else "")
    return f"the agent changed the verifier's toolchain: {listed}; the verifier did not run"


@dataclass(frozen=True)
class Verdict:
    """What the check's output means for the rollout."""

    withheld: str | None
    """Why the reward is withheld (the verifier must not run), or None."""
    note: str | None
    """A note when the check could not run for an agent that is not root (it cannot write the watched paths)."""
    listing: str
    """Every finding, one `<kind> <path>` a line (for out/<id>/verifier/toolchain.txt)."""


def judge(printed: str, *, root_agent: bool) -> Verdict:
    """The verdict on the check's output: any finding withholds the reward. A check that could not run does too for a
    root agent; otherwise it is a note."""
    findings = parse_findings(printed)
    listing = "".join(f"{f.kind} {f.path}\n" for f in findings)
    flagged = [f for f in findings if f.kind != "unchecked"]
    if flagged:
        return Verdict(describe(flagged), None, listing)
    if not findings:
        return Verdict(None, None, listing)
    why = f"the verifier's toolchain could not be checked: {findings[0].path}"
    if root_agent:
        return Verdict(f"{why}, and the agent ran as root; the verifier did not run", None, listing)
    return Verdict(None, why, listing)


def unchecked_part(why: str) -> str:
    """Shell standing in for `check_part` when the snapshot step could record no baseline."""
    return f"echo {shlex.quote(f'unchecked {why}')}"


HARNESS_TOOLS = frozenset(
    "sh bash env find awk md5sum cat mkdir readlink stat grep ldconfig kill tar base64 rm chmod chown ln ls sort sed "  # noqa: SIM905
    "touch mv head tail xargs cut tr tee id setpriv sleep timeout cp wc comm install uname diff test".split()
)
"""The commands the harness's own root steps run (this check's included), by name: in a PATH directory or as an
alternative, whether changed, removed or put first on PATH."""
_IMPLEMENTATIONS = frozenset(("dash", "busybox", "mawk", "gawk", "nawk", "original-awk"))
"""What those names lead to in common images: changed or removed, they are flagged; a new one is not."""
_HARNESS_LIBS = re.compile(
    r"(libc|libm|libselinux|libpcre2-8|libacl|libattr|libtinfo|libcrypto|libmd|libz)\.so(\.[0-9]+)*"
)
"""The libraries those commands load, by name: changed or removed, they are flagged (an upgrade of one too)."""
_LOADER_NAMES = re.compile(r"libc\.so\.6|ld-linux[^/]*\.so\.[0-9]+")
"""The loader and libc: flagged wherever one is changed, removed or added (no honest install adds another)."""
_TOOL_FOLDERS = frozenset((*PATH_DIRS, *LIB_DIRS, "/usr", "/usr/local"))
"""The folders of commands and libraries, and those above them: none of them may become a link elsewhere."""
_MERGED_USR = {f"/{name}": (f"usr/{name}", f"/usr/{name}") for name in ("bin", "sbin", "lib", "lib32", "lib64")}
"""The links a merged-/usr image has in place of these folders."""


def adds_commands(changes: list[tuple[str, str]]) -> bool:
    """Whether the engine's list adds a file named like a harness command to a PATH folder."""
    return any(kind == "added" and _on_path(path) for kind, path in changes)


def image_commands(listed: bytes, named: bytes, baseline: Baseline) -> frozenset[str] | None:
    """The command names the image had in PATH folders, from the snapshot's list. None when its md5 is not the one the
    harness kept (a root agent rewrote it)."""
    if hashlib.md5(listed + named).hexdigest() != baseline.md5:
        return None
    names = set()
    for line in listed.decode("utf-8", "surrogateescape").splitlines():
        folder, _, name = line.rpartition("/")
        if (folder or "/") in PATH_DIRS:
            names.add(name)
    return frozenset(names)


def folders_changed(changes: list[tuple[str, str]]) -> list[str]:
    """The command and library folders the engine lists as changed. Each may now be a link the engine's list does not
    follow, so the engine is asked what each is."""
    return [path for kind, path in changes if kind == "changed" and path in _TOOL_FOLDERS]


def harness_tools_changed(
    changes: list[tuple[str, str]], commands: frozenset[str] | None, links: Mapping[str, str | None]
) -> list[str]:
    """The changed files (from the engine) that touch what the harness's root steps run on. `commands`: the image's
    PATH names, to tell a new command from a shadowing one; `links`: where each changed folder leads now."""
    found = [
        f"{folder} (now a link to {target})"
        for folder, target in links.items()
        if target is not None and target not in _MERGED_USR.get(folder, ())
    ]
    for kind, path in changes:
        folder, _, name = path.rpartition("/")
        folder = folder or "/"
        shadows = kind != "added" or commands is None or name in commands
        if (
            path == "/etc/ld.so.preload"
            or (_on_path(path) and shadows)
            or (folder == "/etc/alternatives" and name in HARNESS_TOOLS)
            or (folder in PATH_DIRS and name in _IMPLEMENTATIONS and kind != "added")
            or (_HARNESS_LIBS.fullmatch(name) and kind != "added")
            or _LOADER_NAMES.fullmatch(name)
            or (kind != "changed" and path in (*PATH_DIRS, *LIB_DIRS))
        ):
            found.append(f"{path} ({kind})")
    return found


def _on_path(path: str) -> bool:
    """A path in a PATH folder named like a command the harness runs."""
    folder, _, name = path.rpartition("/")
    return (folder or "/") in PATH_DIRS and name in HARNESS_TOOLS


def describe_harness_tools(found: list[str], *, most: int = 8) -> str:
    """Why the reward is withheld when `harness_tools_changed` found entries."""
    listed = ", ".join(found[:most]) + (f" and {len(found) - most} more" if len(found) > most else "")
    return (
        f"the agent changed what the harness's own steps run on: {listed}; nothing the sandbox reports can be "
        "trusted after that, so the verifier did not run (run such tasks with --verifier-mode separate)"
    )
