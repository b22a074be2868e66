"""The agent's services: processes holding a listening socket, left alive for the tests.

In shared mode the stop step kills every process of the agent but these. They are found from the kernel's socket
tables and `/proc/<pid>/fd`, as the agent's user (root cannot read another user's fds without CAP_SYS_PTRACE). The
agent's user stops them (SIGSTOP); root's check then finds them frozen (`commands.agent_gone`).
"""

from __future__ import annotations

from dataclasses import dataclass

LISTENING = r"""listening=" " inodes=" "
for f in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$f" ] || continue
  while read -r _ local _ st _ _ _ _ _ inode _; do
    [ "$st" = 0A ] && [ "$inode" != 0 ] && inodes="$inodes$inode:$((0x${local##*:})) "
  done < "$f"
done
if [ -r /proc/net/unix ]; then
  while read -r _ _ _ flags type st inode _; do
    [ "$flags" = 00010000 ] && [ "$type" = 0001 ] && [ "$st" = 01 ] && inodes="$inodes$inode:unix "
  done < /proc/net/unix
fi
if [ "$inodes" != " " ]; then
  found=$(find /proc/[0-9]*/fd -lname 'socket:\[*' -printf '%h %l\n' 2>/dev/null)
  while read -r dir link; do
    i=${link#socket:[}; i=${i%]}
    case $inodes in *" $i:"*) ;; *) continue ;; esac
    port=${inodes#*" $i:"}; port=${port%% *}; p=${dir#/proc/}; p=${p%/fd}
    case $listening in *" $p:$port "*) ;; *) listening="$listening$p:$port " ;; esac
  done <<EOF
$found
EOF
fi
"""
"""Sets `$listening` to ` pid:port pid:port ... ` (a space around each; `unix` for a unix socket): every process
this shell may look into that holds a listening TCP/TCP6 or unix stream socket. Builtins but one `find`."""

KILL_BUT_SERVICES = (
    LISTENING
    + 'kill -KILL $(for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" != "$$" ] || continue; '
    + '[ "$(stat -c %u "$d" 2>/dev/null)" = "$1" ] || continue; '
    + 'case $listening in *" $p:"*) ;; *) echo "$p" ;; esac; done) 2>/dev/null || :\n'
)
"""$1: the agent's uid. Kills every process of it (but this shell) that holds no listening socket: the stop step's
kill when the agent's services are kept (as root), and the agent's launch's last line (as the agent's user)."""

KEEP_SERVICES = (
    KILL_BUT_SERVICES
    + r"""for l in $listening; do
  p=${l%%:*}; [ "$(stat -c %u /proc/$p 2>/dev/null)" = "$1" ] || continue
  kill -STOP "$p" 2>/dev/null && printf '%s %s\n' "$p" "${l#*:}"
done
"""
)
"""The stop step's kill round when services are kept, as the agent's user ($1: its uid): every other process of
it killed, each holding a listening socket stopped (frozen until the verifier's own sandbox exists) and printed
as `pid port`, a line per socket."""


@dataclass(frozen=True)
class Service:
    """A process of the agent kept alive for the tests: it holds a listening socket."""

    pid: int
    port: str
    """The TCP port, or `unix`."""
    comm: str
    """Its command name (chosen by the agent: for notes only)."""


def parse_services(stopped: str, ports: str) -> list[Service]:
    """The stopped services (`pid comm` lines) with their ports (`pid port` lines; `?` when unknown)."""
    by_pid: dict[str, list[str]] = {}
    for line in ports.splitlines():
        pid, _, port = line.partition(" ")
        if pid.isdigit() and port and port not in by_pid.setdefault(pid, []):
            by_pid[pid].append(port)
    found = []
    for line in stopped.splitlines():
        pid, _, comm = line.partition(" ")
        if pid.isdigit():
            found += [Service(int(pid), port, comm[:64]) for port in by_pid.get(pid) or ["?"]]
    return found


def services_note(services: list[Service]) -> str:
    """The result's note naming the services kept for the tests."""
    listed = ", ".join(f"pid {s.pid} ({s.comm!r}) port {s.port}" for s in services)
    return (
        f"kept the agent's services alive for the tests ({listed}); the verifier ran in a snapshot of the "
        "sandbox sharing only its network (loopback)"
    )
