"""The guard around tests/test.sh (agentbake/runner/harness/subreaper.py) run on this host's python, how its report
is read (`verifier.guard_from`), and the command without it. The attacks through whole rollouts are in
test_verifier.py."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentbake.runner import SandboxRequest
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.harness import subreaper
from agentbake.runner.harness.commands import root_test_sh
from agentbake.runner.harness.upload import hand_over, tar_archive
from agentbake.runner.harness.verifier import PROCESSES, Guard, guard_from, parse_reward_files, reward_from


def guarded(script: str, *, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    """`script` (sh) under the wrapper as the verifier runs it, with a pipe on fd 3: (its exit status, its report,
    the script's stdout)."""
    read, write = os.pipe()
    wrapper = [sys.executable, "-I", "-S", "-c", inspect.getsource(subreaper), "sh", "-c", script]
    try:
        ran = subprocess.run(  # the pipe moved to fd 3, by a shell (its parent) as in the verifier
            ["bash", "-c", f'exec 3>&{write} {write}>&-; "$@"; exit $?', "bash", *wrapper],
            pass_fds=(write,),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=30,
            check=False,
        )
    finally:
        os.close(write)
    with os.fdopen(read) as report:
        return ran.returncode, report.read(), ran.stdout


def test_a_test_sh_that_leaves_nothing_is_clean_with_its_exit_status() -> None:
    assert guarded("echo hi; exit 5") == (subreaper.CLEAN, "5\n", "hi\n")
    assert guarded("kill -9 $$")[:2] == (subreaper.CLEAN, "137\n")  # as a shell says it
    assert guarded("exec /nonexistent/program")[:2] == (subreaper.CLEAN, "127\n")


def test_helpers_stopped_and_waited_for_are_not_flagged() -> None:
    script = """sleep 30 & p=$!
( setsid sh -c 'echo $$ > "$0"; exec sleep 30' "$PWD/daemon" & )
while [ ! -s daemon ]; do sleep 0.01; done; d=$(cat daemon)
python3 -c 'import subprocess; subprocess.run(["true"])'
kill $p; wait $p
kill $d; while kill -0 $d 2>/dev/null; do sleep 0.01; done
echo done"""
    for _ in range(5):
        status, report, out = guarded(f'cd "$(mktemp -d)" || exit\n{script}')
        assert (status, report, out) == (subreaper.CLEAN, "0\n", "done\n")


@pytest.mark.parametrize(
    ("script", "names"),
    [
        # (each waits a moment before it ends, so that what it left has started its program: names are a snapshot)
        ("setsid sleep 2 & sleep 0.2", "sleep"),  # a detached process still running
        ("(sleep 2 & sleep 2 &); sleep 0.2; exit 3", "sleep*2"),  # orphans, reparented to the guard
        ("(sleep 0.5; exit 0) & sleep 0.2", "sh,sleep"),  # a child of test.sh, still running
        ("(sh -c 'sleep 2; :' &); sleep 0.2", "sh,sleep"),  # a tree: every process below the guard is named
    ],
)
def test_anything_that_outlives_test_sh_is_flagged_and_named(script: str, names: str) -> None:
    status, report, _ = guarded(f"exec >/dev/null 2>&1\n{script}")  # what is left does not hold the test's pipes
    assert status == subreaper.OUTLIVED, report
    rc, count, listed = report.split()
    assert (rc, listed) == ("3" if "exit 3" in script else "0", names)
    assert int(count) == len(names.replace("*2", ",x").split(","))


def test_test_sh_sees_the_environment_and_cwd_it_was_given(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "LANG": "C", "ODD": "a=b c"}  # a C locale: Python would add LC_CTYPE
    status, report, out = guarded("env | sort; pwd; ls -l /proc/$$/fd | grep -c ' -> '", env=env, cwd=tmp_path)
    assert (status, report) == (subreaper.CLEAN, "0\n")
    lines = out.splitlines()
    assert sorted(line for line in lines if "=" in line) == sorted(["LANG=C", "ODD=a=b c", f"PATH={env['PATH']}"] + [
        line for line in lines if line.startswith(("PWD=", "SHLVL=", "_="))  # the shell's own
    ])  # fmt: skip
    assert str(tmp_path) in lines
    assert lines[-1] == "3"  # the shell holds stdin, stdout and stderr: the report pipe is not passed to test.sh


def test_sigpipe_is_the_default_again_in_test_sh() -> None:
    # Python ignores SIGPIPE; test.sh must not inherit that (`yes | head` would then never end on EPIPE).
    status, _, out = guarded("grep SigIgn /proc/$$/status")
    assert status == subreaper.CLEAN
    assert not int(out.split()[1], 16) & (1 << 12)


@pytest.mark.parametrize(
    ("printed", "exit_code", "withheld", "unguarded"),
    [
        ("0 \n7\n", 7, None, None),
        ("3 \n0 2 sh,sleep\n", 0, "2 processes that tests/test.sh started outlived it (sh, sleep)", None),
        ("3 \n0 1 sleep*3\n", 0, "1 process that tests/test.sh started outlived it (sleep*3)", None),
        ("0 \n0\n0\n", None, "the guard around tests/test.sh did not finish", None),  # a line added to its report
        ("0 \nclean\n", None, "the guard around tests/test.sh did not finish", None),
        ("3 \n0\n", None, "the guard around tests/test.sh did not finish", None),
        ("137 \n\n", None, "the guard around tests/test.sh did not finish (status 137", None),  # killed
        ("none 2\n\n", 2, None, "the sandbox has no python"),
        ("4 1\nImportError: no ctypes\n", 1, None, "its python could not run the guard (ImportError: no ctypes)"),
        ("127 0\n\n", 0, None, "its python could not run the guard (exit 127)"),
    ],
)
def test_what_the_guard_said(printed: str, exit_code: int | None, withheld: str | None, unguarded: str | None) -> None:
    guard = guard_from(printed)
    assert guard.exit_code == exit_code
    assert (guard.withheld is None, guard.unguarded is None) == (withheld is None, unguarded is None)
    assert withheld is None or guard.withheld.startswith(withheld), guard.withheld
    assert unguarded is None or unguarded in guard.unguarded


@pytest.mark.docker
def test_without_a_python_test_sh_runs_as_before_with_a_note(image: str, backend: DockerBackend) -> None:
    """The whole root command in a sandbox: with the image's python guarded; with none, or one that cannot run,
    test.sh runs once, unguarded (what it leaves is still stopped and killed), its reward counted, with a note."""
    test_sh = "echo ran >> /logs/verifier/runs; echo 1 > /logs/verifier/reward.txt; exit 2\n"
    with backend.create(SandboxRequest(image=image, rollout_id="subreaper-fallback")) as handle:
        keep = " ".join(handle.exec(["sh", "-c", PROCESSES], user="root").stdout.split())
        said = {}
        for python in (handle.python, None, "/nonexistent/python"):
            handle.exec("rm -rf /tests /logs && mkdir -p -m 700 /tests && mkdir -p /logs/verifier", user="root")
            tests = hand_over(handle, tar_archive({"/tests/test.sh": test_sh.encode()}), "/root/t.tar", in_env=True)
            command = root_test_sh("true", python).render()
            ran = handle.exec(["sh", "-c", command.script, "sh", keep, tests.unpack()], envs=tests.envs, user="root")
            parts = command.split(ran.stdout)
            assert reward_from(parse_reward_files(parts["rewards"])) == 1.0
            assert handle.exec("cat /logs/verifier/runs", user="root").stdout == "ran\n"  # once
            said[python] = guard_from(parts["status"])
    assert said[handle.python] == Guard(2)
    assert (said[None].exit_code, said[None].withheld) == (2, None)
    assert "the sandbox has no python" in said[None].unguarded
    assert (said["/nonexistent/python"].exit_code, said["/nonexistent/python"].withheld) == (2, None)
    assert "its python could not run the guard (exit 127)" in said["/nonexistent/python"].unguarded
