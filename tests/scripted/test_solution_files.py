"""The first step hands over what the oracle gets besides solve.sh: the task's solution/ files at /solution (here
a folder of the test's temp dir stands in for it), played through real bash, one fresh shell per call, as
OpenCode's and Pi's bash tools run a call."""

from __future__ import annotations

import gzip
import io
import os
import random
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from agentbake.scripted import SolutionPolicy, solution_steps
from agentbake.scripted.shell_steps import END_MARK, state_folder
from agentbake.scripted.solution_files import (
    ARCHIVE_MAX,
    FILES_READ_MAX,
    SOLUTION_DIR,
    SolutionFiles,
    read_solution_files,
    solution_archive,
)
from tests.scripted.test_shell_steps import BASH

MAX_ARG_STRLEN = 128 * 1024
"""Linux's limit on one exec argument: an agent hands the step's command to its shell as one."""
HELPER = b"def helper():\n    return 42\n"
BINARY = bytes(range(256)) + b"\r\n\x00no newline at the end"


@dataclass
class Played:
    stdout: str
    stderr: str
    statuses: list[int]


def play(steps: list[str], workdir: Path, tmp: Path) -> Played:
    """Each step's command in a fresh `bash -c` (one exec argument) in the workdir, as an agent's shell tool."""
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp)}
    out, err, statuses = "", "", []
    for command in steps:
        result = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True)
        out, err = out + result.stdout, err + result.stderr
        statuses.append(result.returncode)
    return Played(out, err, statuses)


def write_solution(root: Path, solve: str, files: dict[str, tuple[bytes, int]]) -> Path:
    """A solution/ folder: solve.sh and `files` (relative path -> bytes, mode)."""
    root.mkdir(parents=True)
    (root / "solve.sh").write_text(solve)
    for name, (data, mode) in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        (root / name).chmod(mode)
    return root


def placed(root: Path) -> dict[str, tuple[bytes, int]]:
    """The files under `root`: relative path -> (bytes, mode)."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777)
        for p in root.rglob("*")
        if p.is_file()
    }


def test_the_first_step_places_the_files_byte_for_byte_with_their_modes(tmp_path: Path):
    target = tmp_path / "root" / "solution"  # its parent is missing too: made as `mkdir -p` would
    solve = f"#!/bin/bash\nset -e\ncp {target}/helper.py .\n\n{target}/bin/run.sh\n\ncmp {target}/data.bin data.bin\n"
    run_sh = b"#!/bin/sh\necho run.sh ran\n"
    folder = write_solution(
        tmp_path / "solution",
        solve,
        {"helper.py": (HELPER, 0o644), "bin/run.sh": (run_sh, 0o775), "data.bin": (BINARY, 0o600)},
    )
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "data.bin").write_bytes(BINARY)
    steps = solution_steps(solve, files=read_solution_files(folder), solution_dir=str(target))
    played = play(steps, tmp_path / "w", tmp_path / "tmp")
    assert (played.stdout, played.stderr, played.statuses) == ("run.sh ran\n", "", [0, 0, 0])
    # As the oracle's upload has them: modes within 0755, then readable (and executable when one x bit was) by all.
    assert placed(target) == {
        "bin/run.sh": (run_sh, 0o755),
        "data.bin": (BINARY, 0o644),
        "helper.py": (HELPER, 0o644),
        "solve.sh": (solve.encode(), 0o644),
    }
    assert (target / "bin").stat().st_mode & 0o777 == 0o755 and (tmp_path / "w" / "helper.py").read_bytes() == HELPER
    # Only the first step carries them; the others are what they were.
    assert steps[1:] == solution_steps(solve)[1:] and steps[0] != solution_steps(solve)[0]


def test_a_solution_of_solve_sh_alone_places_nothing(tmp_path: Path):
    folder = write_solution(tmp_path / "solution", "echo hi\n", {})
    assert read_solution_files(folder) == SolutionFiles({})
    assert solution_steps("echo hi\n", files=read_solution_files(folder)) == solution_steps("echo hi\n")


def test_the_archive_is_reproducible(tmp_path: Path):
    """Sorted, owner 0, no time: the same files give the same command (so the same token ids), whenever made."""
    files = {"b/z.txt": (b"z\n", 0o644), "a.py": (HELPER, 0o755), "b/a.txt": (b"a\n", 0o600)}
    first = write_solution(tmp_path / "one" / "solution", "cat /solution/a.py\n", files)
    second = write_solution(tmp_path / "two" / "solution", "cat /solution/a.py\n", files)
    for path in second.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    one, two = read_solution_files(first), read_solution_files(second)
    assert solution_steps("cat /solution/a.py\n", files=one) == solution_steps("cat /solution/a.py\n", files=two)
    archive = solution_archive(one.files)
    assert archive == solution_archive(two.files) and gzip.decompress(archive)  # a gzip stream with mtime 0
    assert archive[4:8] == b"\0\0\0\0"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["a.py", "b", "b/a.txt", "b/z.txt", "solve.sh"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}


def test_files_over_the_cap_are_not_placed_and_the_step_says_so(tmp_path: Path):
    target = tmp_path / "root" / "solution"
    solve = "echo one\n\necho two\n"
    noise = random.Random(0).randbytes(ARCHIVE_MAX + 1024)  # incompressible
    folder = write_solution(tmp_path / "solution", solve, {"noise.bin": (noise, 0o644)})
    files = read_solution_files(folder)
    assert files.files == {} and files.too_large == "2 files, 66 KiB as a tar.gz"
    steps = solution_steps(solve, files=files, solution_dir=str(target))
    assert all(len(step.encode()) < 16 * 1024 for step in steps)
    (tmp_path / "w").mkdir()
    played = play(steps, tmp_path / "w", tmp_path / "tmp")
    assert (played.stdout, played.statuses) == ("one\ntwo\n", [0, 0]) and not target.exists()
    assert played.stderr == (
        f"{state_folder(solve)}: the solution/ files (2 files, 66 KiB as a tar.gz) exceed the 64 KiB cap of the "
        f"scripted model, so they are not placed at {target}; the steps that read them may fail\n"
    )


def test_files_too_large_to_compress_under_the_cap_are_not_read(tmp_path: Path):
    folder = write_solution(tmp_path / "solution", "true\n", {"zeros": (bytes(FILES_READ_MAX), 0o644)})
    files = read_solution_files(folder)
    assert files.files == {} and files.too_large == "2 files, 1025 KiB before compression"


def test_an_archive_at_the_cap_still_fits_one_exec_argument(tmp_path: Path):
    """A first block of a few KiB beside an archive just under the cap: the command still runs as `bash -c`."""
    target = tmp_path / "solution-dir"
    solve = "# " + "x" * 8000 + f"\ncmp {target}/noise.bin ../noise.bin && echo same\n"
    noise = random.Random(1).randbytes(ARCHIVE_MAX - 1024)
    folder = write_solution(tmp_path / "solution", solve, {"noise.bin": (noise, 0o644)})
    (tmp_path / "noise.bin").write_bytes(noise)
    files = read_solution_files(folder)
    assert files.files and len(solution_archive(files.files)) <= ARCHIVE_MAX
    (step,) = solution_steps(solve, files=files, solution_dir=str(target))
    assert len(step.encode()) < MAX_ARG_STRLEN - 16 * 1024  # room for an agent's own wrapping of the command
    (tmp_path / "w").mkdir()
    assert play([step], tmp_path / "w", tmp_path / "tmp") == Played("same\n", "", [0])


def test_a_target_that_cannot_be_made_prints_a_line_and_the_script_goes_on(tmp_path: Path, make_task):
    """As for an agent that is not root (`/` is root's): here the target's parent is a file, for any user."""
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "solution"
    solve = "set -e\necho one\n\necho two\n"
    folder = write_solution(tmp_path / "solution", solve, {"helper.py": (HELPER, 0o644)})
    steps = solution_steps(solve, files=read_solution_files(folder), solution_dir=str(target))
    (tmp_path / "w").mkdir()
    played = play(steps, tmp_path / "w", tmp_path / "tmp")
    assert (played.stdout, played.statuses) == ("one\ntwo\n", [0, 0])
    said = f"{state_folder(solve)}: could not place the solution/ files at {target}; the steps that read them may fail"
    assert played.stderr.splitlines()[-1] == said and not END_MARK.search(played.stderr)
    # The policy goes on to the next step: the line is not the script's end.
    policy = SolutionPolicy([make_task("unplaced", "Go on.", solve)])
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": played.stdout + played.stderr},
    ]
    assert policy({"messages": messages, "tools": [BASH]}).tool_calls == [("bash", {"command": steps[1]})]


def test_the_policy_places_the_tasks_solution_folder_at_slash_solution(make_task):
    solve = "cp /solution/helper.py .\n\npython3 helper.py\n"
    task = make_task("helped", "Use the helper.", solve)
    (task / "solution" / "helper.py").write_bytes(HELPER)
    policy = SolutionPolicy([task])
    (first, second) = policy.tasks[0].steps
    assert first == solution_steps(solve, files=read_solution_files(task / "solution"))[0]
    unpack = f"\nmkdir -p -- {SOLUTION_DIR} && base64 -d <<'AGENTBAKE_END' | tar -xzmf - -C {SOLUTION_DIR} || echo"
    assert SOLUTION_DIR == "/solution" and unpack in first
    assert second == solution_steps(solve)[1]
    reply = policy({"messages": [{"role": "user", "content": "Use the helper."}], "tools": [BASH]})
    assert reply.tool_calls == [("bash", {"command": first})]
