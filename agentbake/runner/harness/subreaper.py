"""The wrapper test.sh runs under: a child subreaper that tells, race-free, whether anything test.sh started outlived
it.

Run as `PYTHON -I -S -c SOURCE PROGRAM ARGS...` with a pipe on fd 3 for its report; standard library only. Any child
it still has once test.sh was waited for outlived test.sh. It is not dumpable, and its exit status is the part of
its report no other process can forge: `CLEAN`, `OUTLIVED` or `CANNOT`. fd 3 gets test.sh's exit status and, for
`OUTLIVED`, the count and command names. test.sh gets this process's environment, cwd and standard streams, with
SIGPIPE and SIGXFSZ restored.
"""

import os
import sys

CLEAN = 0
OUTLIVED = 3
CANNOT = 4
_REPORT_FD = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_SIGPIPE = 13
_SIGXFSZ = 25
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-:@/")


def main(argv):
    try:
        environment = _environment_given()
        restore = _signals_to_restore()
        _become_subreaper()
        os.set_inheritable(_REPORT_FD, False)
    except Exception as exc:  # any failure here: test.sh has not run, and runs the old way
        _report(f"{type(exc).__name__}: {exc}")
        os._exit(CANNOT)
    try:
        child = os.posix_spawnp(argv[0], argv, environment, setsigdef=restore)
    except OSError:
        _report("127")  # as a shell says of a program it cannot run
        os._exit(CLEAN)
    late = []  # processes that ended after test.sh had (reaped on the way)
    while True:
        ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        if ended.si_pid == child:
            break
        name = _name(ended.si_pid)
        os.waitid(os.P_PID, ended.si_pid, os.WEXITED)
        if os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            late.append(name)
    done = os.waitid(os.P_PID, child, os.WEXITED)
    status = done.si_status if done.si_code == os.CLD_EXITED else 128 + done.si_status
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        left = True  # a child, alive (None) or dead but not waited for
    except ChildProcessError:
        left = False
    if not left and not late:
        _report(str(status))
        os._exit(CLEAN)
    names = late + _descendants()
    counted = {}
    for name in names:
        counted[name] = counted.get(name, 0) + 1
    listed = ",".join(name if n == 1 else f"{name}*{n}" for name, n in sorted(counted.items()))
    _report(f"{status} {len(names)} {listed or '?'}")
    os._exit(OUTLIVED)


def _environment_given():
    with open("/proc/self/environ", "rb") as given:
        entries = given.read().split(b"\0")
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)


def _signals_to_restore():
    """SIGPIPE and SIGXFSZ, but those the parent shell ignores (a program inherits ignored signals)."""
    ignored = 0
    try:
        with open(f"/proc/{os.getppid()}/status") as status:
            for line in status:
                if line.startswith("SigIgn:"):
                    ignored = int(line.split()[1], 16)
    except OSError:
        pass
    return [sig for sig in (_SIGPIPE, _SIGXFSZ) if not ignored & (1 << (sig - 1))]


def _become_subreaper():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for option, value in ((_PR_SET_CHILD_SUBREAPER, 1), (_PR_SET_DUMPABLE, 0)):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _stat(pid):
    """(command name, parent pid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    head, _, tail = text.rpartition(b")")
    fields = tail.split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    name = head.partition(b"(")[2].decode("utf-8", "replace")
    return "".join(c if c in _NAME_CHARS else "?" for c in name) or "?", int(fields[1])


def _name(pid):
    found = _stat(pid)
    return found[0] if found else "?"


def _descendants():
    """The command names of every process below this one (a snapshot: they still run)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(entry)
            if found:
                parents[int(entry)] = found
    names, below = [], {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, (name, parent) in parents.items():
            if parent in below and pid not in below:
                below.add(pid)
                names.append(name)
                grew = True
    return names


def _report(line):
    os.write(_REPORT_FD, (line + "\n").encode())


if __name__ == "__main__":
    main(sys.argv[1:])
