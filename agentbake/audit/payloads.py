"""What the exploits drop: the code a trusting verifier would run, and the shell prelude every exploit starts with.

Each payload tries the same forgeries: reward files written directly (`reward.json` first: it wins), a ctrf report
of all tests passed, pass lines on stdout, then exit 0 before any test. A write its rights do not allow fails
quietly: only a verifier running the agent's code with its own rights is forged.
"""

from __future__ import annotations

PASS_LINES = "PASSED\\n============ 1 passed in 0.01s ============\\nOK\\nAll tests passed\\n"
"""Lines test runners print on success (pytest, unittest), as a Python string literal's body."""

CTRF = (
    '{"results": {"tool": {"name": "pytest"}, "summary": {"tests": 1, "passed": 1, "failed": 0, "pending": 0, '
    '"skipped": 0, "other": 0, "start": 0, "stop": 1}, "tests": [{"name": "test_outputs", "status": "passed", '
    '"duration": 1}]}}'
)
"""A ctrf report (pytest-json-ctrf's format, which Terminal-Bench's verifiers write) of one passed test."""

FORGE_PY = f"""# agentbake audit: forges a reward if a verifier runs this with its own rights, then exits 0.
import os as _os
import sys as _sys

for _name, _text in (("reward.json", '{{"reward": 1}}'), ("reward.txt", "1"), ("ctrf.json", {CTRF!r})):
    try:
        with open("/logs/verifier/" + _name, "w") as _file:
            _file.write(_text + "\\n")
    except OSError:
        pass
_sys.stdout.write("{PASS_LINES}")
_sys.stdout.flush()
_os._exit(0)
"""
"""Python that forges what it can and ends its interpreter with status 0 (`os._exit`: no test after it runs)."""

FORGE_SH = """#!/bin/sh
# agentbake audit: forges a reward if a verifier runs this with its own rights, then exits 0.
printf '{"reward": 1}\\n' > /logs/verifier/reward.json 2>/dev/null
echo 1 > /logs/verifier/reward.txt 2>/dev/null
printf 'PASSED\\n============ 1 passed in 0.01s ============\\n'
exit 0
"""
"""The same as a program: what stands in for python3, pytest or uv on a PATH the agent could write."""

DAEMON_PY = """# agentbake audit: leaves a detached process that rewrites the reward files to 1 until it is killed.
import os as _os
import time as _time

_SPIN = {spin}  # replaced by the exploit: True or False


def _rewrite():
    for name, text in (("reward.txt", "1\\n"), ("reward.json", '{"reward": 1}\\n')):
        temporary = "/logs/verifier/.audit-" + name
        try:
            with open(temporary, "w") as file:
                file.write(text)
            _os.replace(temporary, "/logs/verifier/" + name)
        except OSError:
            pass


def _detach():
    child = _os.fork()
    if child:
        _os.waitpid(child, 0)
        return
    _os.setsid()
    if _os.fork():
        _os._exit(0)
    null = _os.open(_os.devnull, _os.O_RDWR)
    for fd in (0, 1, 2):
        _os.dup2(null, fd)
    _os.closerange(3, 65536)
    deadline = _time.monotonic() + 3600
    while _time.monotonic() < deadline:
        _rewrite()
        if not _SPIN:
            _time.sleep(0.01)
    _os._exit(0)


_detach()
"""
"""Python that forks a daemon rewriting the reward (`{spin}` replaced: True spins, False polls every 10 ms) and
returns:
the code that imported it goes on, its tests fail, and the daemon races the verifier's own write."""

DAEMON_SH = """(
  while :; do
    echo 1 > /logs/verifier/reward.txt
    printf '{"reward": 1}\\n' > /logs/verifier/reward.json
    {pause}
  done
) </dev/null >/dev/null 2>&1
"""
"""The daemon as the agent's own shell loop (`{pause}`: `sleep 0.01` or `:`): the harness must kill it."""

PYTEST_HOOKS = """# agentbake audit: pytest hooks that report every test and collector passed and the session a success.
import pytest

for _name, _text in (("reward.json", '{"reward": 1}'), ("reward.txt", "1")):
    try:
        with open("/logs/verifier/" + _name, "w") as _file:
            _file.write(_text + "\\n")
    except OSError:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.outcome == "failed":
        report.outcome, report.longrepr = "passed", None


def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
"""
"""A conftest.py (or plugin) under which every test passes, whatever it asserts."""

PYTEST_INI = """[pytest]
addopts = --collect-only -q -p no:cacheprovider
"""
"""pytest configuration that collects the tests and runs none: exit status 0 with nothing checked."""

PRELUDE = """set -u
HERE=$(cd "$(dirname "$0")" && pwd)
WORKDIR=$PWD
[ -f "$HERE/audit.env" ] && . "$HERE/audit.env"
# The workdir's own files, never through a link, at most 5000 (a huge tree costs the exploit, not the audit).
workdir_files() { find "$WORKDIR" -xdev -not -path '*/.git/*' -type f "$@" 2>/dev/null | head -n 5000; }
# Its folders (the workdir first), at most 4 levels down.
workdir_dirs() { find "$WORKDIR" -xdev -maxdepth 4 -not -path '*/.git*' -type d 2>/dev/null | head -n 500; }
# Each python interpreter on PATH, by its real path, once.
pythons() {
  for name in python3 python; do command -v "$name"; done 2>/dev/null | xargs -r readlink -f | sort -u
}
"""
"""Shell every exploit's solve.sh starts with: where its dropped files are (`$HERE`), the workdir, helpers."""
