"""The verifier phase's rules: what runs in the sandbox around `tests/test.sh`, and how its reward is read.

Everything the agent left is hostile input here. The harness (`steps.py`) runs these steps in order:

0. `REMOVE_ESCAPING_LINKS` once the agent is dead (in the command that finds none of its processes left),
   before /tests is uploaded: the agent's symlinks that could lead the verifier into /tests or /logs are
   removed (and listed).
1. `PROCESSES` at the start of the rollout, before any task code runs: the sandbox's own processes
   (init, the relay, a backend's daemon), the only ones allowed to outlive the verifier.
2. `guarded_test_sh`: `tests/test.sh` under a child subreaper (`subreaper.py`) that tells, race-free,
   whether a process test.sh started outlived it (`guard_from`: then its reward is withheld), then every
   process that is not one of those, nor the command itself, stopped at once and killed; then
   `KILL_THEN_READ_REWARDS` kills what is still there and describes both reward files without following a
   symlink. A test.sh run as root does all of it in one command (`commands.root_test_sh`).
3. `reward_from` applies Harbor's precedence: `reward.json` (its `reward`), then `reward.txt`; a verifier
   that wrote neither is a `verifier_error`, never a reward of 0.
"""

from __future__ import annotations

import inspect
import json
import math
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from agentbake.runner.harness import subreaper

# Harbor's contract with a task's verifier: its files under /tests, its reward under /logs/verifier.
HARBOR_TESTS_DIR = "/tests"
HARBOR_VERIFIER_LOGS = "/logs/verifier"
REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
MAX_REWARD_BYTES = 64 * 1024
"""A reward file is read up to this size; a longer one does not parse and is a `verifier_error`."""
KILL_ROUNDS = 500
"""Rounds of SIGKILL after test.sh (a killed process shows as alive until it has exited, and the rounds
fork nothing, so they follow each other within milliseconds) before processes that keep reappearing fail
the verifier."""

# For each live process (zombies are dead; init reaps them) sets $p to `pid:starttime` and runs BODY. The
# start time (field 22 of /proc/PID/stat, counted after the command name, which may hold spaces) tells a
# process from a later one that reuses its pid. Only builtins: the loop forks nothing that it would see.
_EACH_PROCESS = (
    'for d in /proc/[0-9]*; do read -r s 2>/dev/null < "$d/stat" || continue; s=${{s##*) }}; set -- $s; '
    '[ "$1" = Z ] && continue; p=${{d#/proc/}}:${{20}}; {body}; done'
)
PROCESSES = _EACH_PROCESS.format(body='echo "$p"')
"""Prints the sandbox's live processes, one `pid:starttime` per line."""

KEEP_OWN = r"""keep=" $1 " a=$$ all=$( [ "$(id -u)" = 0 ] && echo 1 )
while [ "$a" -gt 0 ] && read -r s 2>/dev/null < /proc/$a/stat; do
  s=${s##*) }; set -- $s; keep="$keep$a:${20} "; a=$2
done
"""
"""Sets `$keep`: $1, the processes to keep (`pid:starttime`, space-separated), with this shell and its ancestors
(the backend's exec chain, e.g. `timeout`). A non-root user kills only its own processes. Changes `$@`."""
_NOT_KEPT = 'case $keep in *" $p "*) ;; *) [ -n "$all" ] || [ -O "$d" ] && left="$left ${p%:*}" ;; esac'

KILL_THE_REST = f"""round=0 stuck= found=
while :; do
  left=
  {_EACH_PROCESS.format(body=_NOT_KEPT)}
  [ -z "$left" ] && break
  [ "$round" = 0 ] && found=$left
  round=$((round + 1))
  [ "$round" -le {KILL_ROUNDS} ] || {{ stuck=$left; break; }}
  kill -KILL $left 2>/dev/null
done
"""
"""After `KEEP_OWN`: kills every process not kept; `$stuck`: the pids that kept coming back, if any; `$found`: those
of the first round."""

# test.sh under the subreaper wrapper (`subreaper.py`): its exit status says whether anything test.sh started
# outlived it; fd 3 carries test.sh's status. Without a working wrapper (CANNOT, 126, 127) test.sh runs unguarded.
# Then kill(-1) stops every process this user may signal and the rest are killed: nothing runs after the reward.
_GUARDED = """exec 4>&1
report=$({python} -I -S -c {source} bash {test_sh} 3>&1 >&4 4>&-); guard=$? rc=
exec 4>&-
case $guard in {cannot}|126|127) bash {test_sh}; rc=$? ;; esac
"""
_UNGUARDED = f"bash {HARBOR_TESTS_DIR}/test.sh; rc=$? guard=none report=\n"
_SUBREAPER = shlex.quote(inspect.getsource(subreaper))
GUARD_NONE = "none"
"""The guard's status when the sandbox has no python to run the wrapper (test.sh ran unguarded)."""


def guarded_test_sh(python: str | None) -> str:
    """`tests/test.sh` under the subreaper wrapper run by `python` (None: the sandbox has none; test.sh runs unguarded),
    then in the same command every process it, or code it ran, left behind: stopped at once, killed, and the sandbox's
    own processes (stopped too) continued. Sets $guard, $rc, $report for `GUARD_STATUS`. $1: `PROCESSES` of the
    rollout's start."""
    if python is None:
        run = _UNGUARDED
    else:
        run = _GUARDED.format(
            python=shlex.quote(python),
            source=_SUBREAPER,
            test_sh=f"{HARBOR_TESTS_DIR}/test.sh",
            cannot=subreaper.CANNOT,
        )
    return f"""{KEEP_OWN}{run}kill -STOP -1 2>/dev/null
{KILL_THE_REST}for p in $keep; do kill -CONT "${{p%:*}}" 2>/dev/null; done
"""


GUARD_STATUS = 'printf "%s %s\\n%s\\n" "$guard" "$rc" "$report"'
"""Prints what `guarded_test_sh` learnt, for `guard_from`: the guard's status and test.sh's (when it ran
unguarded), then the wrapper's report."""


@dataclass(frozen=True)
class Guard:
    """What the subreaper wrapper said of test.sh's end (`guard_from`)."""

    exit_code: int | None
    """test.sh's exit status (128 + N for signal N); None when the guard did not say."""
    withheld: str | None = None
    """Why the reward must not count: a process test.sh started outlived it (named), or the guard did not finish."""
    unguarded: str | None = None
    """Why test.sh ran without the guard (no python in the sandbox, or one that could not run it): a note."""


def guard_from(printed: str) -> Guard:
    """`GUARD_STATUS`'s lines as a `Guard`. Only the wrapper's exit status is trusted for the verdict (no other process
    can set it); its report gives test.sh's status and the names, and must be exactly one well-formed line."""
    first, _, report = printed.strip("\n").partition("\n")
    guard, _, rc = first.partition(" ")
    if guard == GUARD_NONE or guard in (str(subreaper.CANNOT), "126", "127"):
        why = (
            "the sandbox has no python (label dev.agentbake.python)"
            if guard == GUARD_NONE
            else (f"its python could not run the guard ({report or f'exit {guard}'})")
        )
        note = (
            f"tests/test.sh ran without the guard that tells whether a process it started outlived it: {why}; a "
            "process left behind was still stopped and killed the moment it ended, before the reward was read"
        )
        return Guard(int(rc) if rc.isdigit() else None, unguarded=note)
    if guard == str(subreaper.CLEAN) and report.isdigit():
        return Guard(int(report))
    outlived = re.fullmatch(r"(\d+) (\d+) (\S+)", report) if guard == str(subreaper.OUTLIVED) else None
    if outlived:
        count, names = int(outlived[2]), outlived[3].replace(",", ", ")
        return Guard(
            int(outlived[1]),
            withheld=f"{count} process{'es' if count != 1 else ''} that tests/test.sh started outlived it ({names}): "
            "its reward is not counted, since a process left behind could have written it after test.sh ended; a "
            "test.sh must stop every process it starts and wait for its end (`kill $pid; wait $pid`) before exiting",
        )
    return Guard(
        None,
        withheld=f"the guard around tests/test.sh did not finish (status {guard or '?'}, report {report[:200]!r}): "
        "a process test.sh started may have stopped it, so its reward is not counted",
    )


_LOGS_PARENT = posixpath.dirname(HARBOR_VERIFIER_LOGS)
STUCK = f"""[ -z "$stuck" ] || {{
  echo "processes kept coming back after {KILL_ROUNDS} rounds of SIGKILL:$stuck" >&2; exit 3; }}
"""
# Describes each reward file without following a symlink.
READ_REWARDS = rf"""d={HARBOR_VERIFIER_LOGS}
for f in {REWARD_JSON} {REWARD_TXT}; do
  if [ -L {_LOGS_PARENT} ] || [ -L "$d" ] || [ ! -d "$d" ]; then echo "$f baddir"
  elif [ -L "$d/$f" ]; then echo "$f symlink"
  elif [ ! -e "$d/$f" ]; then echo "$f absent"
  elif [ ! -f "$d/$f" ]; then echo "$f special"
  elif [ "$(stat -c %h "$d/$f")" != 1 ]; then echo "$f hardlinked"
  else printf '%s file ' "$f"; head -c {MAX_REWARD_BYTES} "$d/$f" | tr '\n\r\0' '   '; echo
  fi
done
"""
KILL_THEN_READ_REWARDS = f'{KEEP_OWN}{KILL_THE_REST}{STUCK}echo "survivors$found"\n{READ_REWARDS}'
"""As root after `guarded_test_sh` (another user's test.sh, or one cut short): kills what is left (processes of
other users too; exit 3 when they keep coming back) and lists the pids it found alive (`survivors`), then describes
each reward file without following a symlink. $1: as for `guarded_test_sh`."""


def survivors(stdout: str) -> list[str]:
    """The pids `KILL_THEN_READ_REWARDS` found alive and killed (none after a test.sh that ended in time and stopped
    what it left)."""
    for line in stdout.splitlines():
        if line.startswith("survivors"):
            return line.removeprefix("survivors").split()
    return []


UNPACK_TESTS = f"""eval "$2" >&2 || {{ echo "could not unpack tests/ into {HARBOR_TESTS_DIR}" >&2; exit 4; }}"""
"""tests/ unpacked by the shell `$2` (`upload.HandedArchive.unpack`: in this shell, so the variables its archive
rode in are unset before test.sh starts); exit 4 when it cannot be."""


# Harbor's two paths as the agent's symlinks must not reach them: /tests and everything under /logs.
PROTECTED_ROOTS = (HARBOR_TESTS_DIR, _LOGS_PARENT)

# $1: the agent's uid, $2: the protected roots, $3: a root-only scratch file, $4: the file touched as the agent
# started. Each of the agent's symlinks (owned by its uid, or changed since $4) is resolved as the kernel will for
# the verifier. It is listed (`path\0target\0`) when it leads into or above a protected root, through /proc, or
# loops; the listed ones are removed once all are judged, so find's order does not matter.
_JUDGE_THEN_REMOVE = r""" -exec sh -c '
walk() {  # $1: the link, $2: its target; sets R (where it leads) and P=1 (through /proc, or a loop)
  case $2 in /*) R=/ ;; *) R=${1%/*}; R=${R:-/} ;; esac
  P=0 n=1 rest=${2#/}
  while [ -n "$rest" ]; do
    c=${rest%%/*}
    case $rest in */*) rest=${rest#*/} ;; *) rest= ;; esac
    case $c in ""|.) continue ;; ..) R=${R%/*}; R=${R:-/}; continue ;; esac
    next=${R%/}/$c
    case $next in /proc|/proc/*) P=1; return ;; esac
    if [ -L "$next" ]; then
      n=$((n + 1)); [ "$n" -le 40 ] || { P=1; return; }
      t=$(readlink -- "$next"; echo x); t=${t%?x}
      case $t in /*) R=/ ;; esac
      rest=${t#/}${rest:+/$rest}
    else
      R=$next
    fi
  done
}
roots=$1; shift
nl="
"
# Every link s own target in one readlink (a fork per link is most of the cost); one per line, so a
# batch where a name or a target holds a newline is read link by link instead.
all=$(readlink -- "$@"; echo x); all=${all%x}
lines=$(printf %s "$all" | wc -l)
[ "$lines" -eq $# ] && case "$*" in *"$nl"*) batch= ;; *) batch=1 ;; esac || batch=
for link in "$@"; do
  if [ -n "$batch" ]; then target=${all%%"$nl"*}; all=${all#*"$nl"}
  else target=$(readlink -- "$link"; echo x); target=${target%?x}
  fi
  walk "$link" "$target"; bad=$P
  for root in $roots; do
    case $R in "$root"|"$root"/*) bad=1 ;; esac
    case $root/ in "${R%/}"/*) bad=1 ;; esac
  done
  [ "$bad" = 0 ] || printf "%s\0%s\0" "$link" "$target"
done' sh "$2" {} + > "$3"
xargs -0 -n 2 sh -c 'rm -f -- "$1"' sh < "$3"
cat "$3"
"""
REMOVE_ESCAPING_LINKS = (
    r'find / \( -path /proc -o -path /sys \) -prune -o -type l \( -newerct "$4" -o ! -uid 0 -uid "$1" \)'
    + _JUDGE_THEN_REMOVE
)
"""Run as root after the agent has stopped, before /tests exists: removes the agent's symlinks that could
lead the verifier into /tests or /logs, and lists them. The agent's: a non-root uid's ($1), and any whose
ctime is after `$4` (`@<seconds>`, a time the harness holds: a root agent's links are root's too, and no
process can set a ctime back, while a marker file's times it could)."""


def remove_escaping_links_under(paths: Sequence[str]) -> str:
    """`REMOVE_ESCAPING_LINKS` for the links under `paths` (existing paths), whatever their owner: a separate
    verifier's artifacts, where every link was copied from the agent's sandbox. ($1 is not read.)"""
    if not paths:
        return ': > "$3"\n'
    return f"find -P {shlex.join(paths)} -type l" + _JUDGE_THEN_REMOVE


def removed_links(stdout: str) -> list[tuple[str, str]]:
    """The `(path, target)` pairs `REMOVE_ESCAPING_LINKS` printed."""
    fields = stdout.split("\0")
    return list(zip(fields[0:-1:2], fields[1::2], strict=False))


# What a verifier prints when it needs a network it does not have (curl, apt, pip and uv, glibc, Node).
NETWORK_FAILURES = re.compile(
    r"Could not resolve host|Temporary failure (in name resolution|resolving)|Name or service not known"
    r"|Network is unreachable|No address associated with hostname|Failed to establish a new connection"
    r"|failed to lookup address information|getaddrinfo (ENOTFOUND|EAI_AGAIN)|Could not connect to"
    r"|Failed to fetch http|dns error"
    # and through agentbake's egress proxy, which answers 403 to what the phase does not allow
    r"|agentbake egress|tunnel error|Tunnel connection failed|CONNECT tunnel failed|returned error: 403"
    r"|403:?\s+Forbidden|Failed to fetch: http",
    re.IGNORECASE,
)
NO_NETWORK = (
    "the verifier ran without network (its network_mode is no-network, or --verifier-network none) and its "
    "output says it needed one ({!r}): give it a network ([verifier] network_mode, --verifier-network public), "
    "or install what it fetches in the task's image (environment/Dockerfile)"
)
REFUSED_HOSTS = (
    "the verifier's network ({mode}) refused {hosts} and its output says it needed it ({line!r}): list what it "
    "fetches in [verifier] allowed_hosts, run with --verifier-network public, or install it in the task's image"
)


def network_failure(output: str) -> str | None:
    """The first line of a verifier's output that says a network was missing, if any."""
    for line in output.splitlines():
        if NETWORK_FAILURES.search(line):
            return line.strip()[:200]
    return None


class RewardError(ValueError):
    """The verifier's reward files hold no reward; the message says which file and why."""


@dataclass(frozen=True)
class RewardFile:
    """What `KILL_THEN_READ_REWARDS` saw of one reward file."""

    name: str
    state: str
    """`file`, `absent`, `symlink`, `special` (a FIFO, a directory, ...), `hardlinked` (another name for a
    file elsewhere) or `baddir` (the log dir itself is a symlink or gone)."""
    text: str = ""
    """A regular file's contents (newlines as spaces, at most `MAX_REWARD_BYTES`)."""

    @property
    def path(self) -> str:
        return f"{HARBOR_VERIFIER_LOGS}/{self.name}"


def parse_reward_files(stdout: str) -> dict[str, RewardFile]:
    """The lines `KILL_THEN_READ_REWARDS` printed, by file name."""
    files = {}
    for line in stdout.splitlines():
        name, _, rest = line.partition(" ")
        state, _, text = rest.partition(" ")
        if name in (REWARD_JSON, REWARD_TXT):
            files[name] = RewardFile(name, state, text)
    return files


def reward_from(files: dict[str, RewardFile]) -> float:
    """Harbor's precedence: `reward.json`'s `reward`, then `reward.txt` (also when reward.json exists but
    has no `reward` key). RewardError when neither holds one, or a file is there but is no regular file."""
    json_file, txt_file = files.get(REWARD_JSON), files.get(REWARD_TXT)
    if json_file is None or txt_file is None:
        raise RewardError(f"could not read {HARBOR_VERIFIER_LOGS} (the reward check printed nothing usable)")
    for file in (json_file, txt_file):
        _refuse_irregular(file)
    if json_file.state == "file":
        found = _reward_json(json_file)
        if found is not None:
            return found
        if txt_file.state != "file":
            raise RewardError(f'{json_file.path}: no "reward" key (and no {REWARD_TXT}): got {json_file.text[:200]!r}')
    elif txt_file.state != "file":
        raise RewardError(
            f"tests/test.sh wrote no reward: neither {json_file.path} nor {txt_file.path} exists "
            '(write a number to reward.txt or {"reward": <number>} to reward.json)'
        )
    return _reward_txt(txt_file)


def _refuse_irregular(file: RewardFile) -> None:
    if file.state == "baddir":
        raise RewardError(f"{HARBOR_VERIFIER_LOGS} was replaced (a symlink, or removed) while the verifier ran")
    if file.state == "symlink":
        raise RewardError(f"{file.path} is a symlink: a reward is read only from a regular file")
    if file.state == "special":
        raise RewardError(f"{file.path} is not a regular file")
    if file.state == "hardlinked":
        raise RewardError(f"{file.path} has other hard links: a reward is read only from a file of its own")
    if file.state not in ("file", "absent"):
        raise RewardError(f"{file.path}: unexpected state {file.state!r}")


def _reward_json(file: RewardFile) -> float | None:
    """reward.json's `reward` (a JSON number, as Harbor reads it), None when it has no such key."""
    expected = 'a JSON object like {"reward": 1.0}'
    try:
        document = json.loads(file.text)
    except ValueError:
        raise RewardError(f"{file.path}: expected {expected}, got {file.text[:200]!r}") from None
    if not isinstance(document, dict):
        raise RewardError(f"{file.path}: expected {expected}, got {file.text[:200]!r}")
    if "reward" not in document:
        return None
    value = document["reward"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RewardError(f'{file.path}: expected a number in "reward", got {json.dumps(value)[:200]}')
    return _finite(file, float(value), file.text)


def _reward_txt(file: RewardFile) -> float:
    text = file.text.strip()
    try:
        reward = float(text)
    except ValueError:
        raise RewardError(f"{file.path}: expected a number, got {text[:200]!r}") from None
    return _finite(file, reward, text)


def _finite(file: RewardFile, reward: float, text: str) -> float:
    if not math.isfinite(reward):
        raise RewardError(f"{file.path}: expected a finite number, got {text[:200]!r}")
    return reward
