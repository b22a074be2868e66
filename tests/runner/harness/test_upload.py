"""The agent's files: one archive unpacked by root in the first root step, owned by the image's user exactly as if
it had unpacked them itself (`harness/upload.py`): compared with a `tar -x` as the user in the same image
state, and checked from inside the sandbox by the oracle itself. An archive up to `ENV_ARCHIVE_MAX` rides in the
environment of the command that unpacks it (no archive written: counted at the engine), a larger one is written
first; neither setup.sh nor test.sh inherits those variables."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.errors import TaskError
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.harness.upload import (
    ENV_ARCHIVE_MAX,
    ENV_PREFIX,
    USER_UMASK_MODES,
    hand_over,
    made_in_user_dirs,
    tar_archive,
    unpack_command,
)
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxHandle, SandboxRequest
from agentbake.tasks import load_task
from tests.runner.faulty_engine import FaultyEngine
from tests.runner.rollouts import reward_if, write_task

MAX_ARG_STRLEN = 128 * 1024  # Linux: the longest `NAME=value` string of a command's environment


def test_the_list_holds_each_file_and_dir_below_the_deepest_user_dir_in_order() -> None:
    files: dict[str, bytes | Path] = {
        "/home/agent/task/solution/data/x": b"",
        "/home/agent/.claude/settings.json": b"",
        "/home/agent/.claude.json": b"",
        "/app/src/main.py": b"",
        "/app/src-old/a": b"",
        "/app/README": b"",
        "/tmp/agentbake-1234/setup.sh": b"",  # the scratch dir is no user dir: root's
    }
    dirs = ["/home/agent", "/home/agent/task", "/app/", "/"]  # "/" never counts
    assert made_in_user_dirs(files, dirs).splitlines() == [
        "/app/README",
        "/app/src-old/",
        "/app/src-old/a",
        "/app/src/",  # a dir comes first, and all below it right after it
        "/app/src/main.py",
        "/home/agent/.claude.json",
        "/home/agent/.claude/",
        "/home/agent/.claude/settings.json",
        "/home/agent/task/solution/",
        "/home/agent/task/solution/data/",
        "/home/agent/task/solution/data/x",
    ]


def test_a_file_name_with_a_line_break_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"environment/a\nb: a file name with a line break; rename it"):
        made_in_user_dirs({"/app/a\nb": tmp_path / "environment" / "a\nb"}, ["/app"])


def test_the_archive_is_roots_with_the_users_modes(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o6775)  # setuid, setgid, group-writable: none of it survives a user's umask
    archive = tar_archive({"/w/run.sh": script, "/h/cfg": b"{}"}, mode_mask=0o755)
    with tarfile.open(fileobj=io.BytesIO(archive)) as members:
        modes = {m.name: (m.mode, m.uid, m.gid, m.uname) for m in members}
    assert modes == {"h/cfg": (0o600, 0, 0, ""), "w/run.sh": (0o755, 0, 0, "")}
    assert USER_UMASK_MODES == 0o755


# The image's own state in the user's dirs before the upload: a root-owned dir the user may write in (with a
# root-owned file the user must not get), a root-owned file the upload replaces, a link to a root-owned dir.
IMAGE_STATE = """
mkdir -m 777 /home/agent/workdir/src && echo keep > /home/agent/workdir/src/keep
echo old > /home/agent/workdir/old
mkdir -m 777 /opt/shared && ln -s /opt/shared /home/agent/workdir/shared
"""
LIST_OWNERS = "find /home/agent /opt/shared -printf '%u:%g %m %y %p\\n' | sort"


def upload_files(tmp_path: Path) -> dict[str, bytes | Path]:
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o775)
    work = "/home/agent/workdir"
    return {
        f"{work}/src/new.py": b"print()\n",
        f"{work}/old": b"new\n",
        f"{work}/deep/er/file.txt": b"data\n",
        f"{work}/deep-x": b"",
        f"{work}/it's a file": b"",
        f"{work}/shared/through-the-link/f": b"",
        f"{work}/tool.sh": tool,
        "/home/agent/.claude/settings.json": b"{}",
        "/home/agent/task/solution/solve.sh": tool,
    }


def run(sandbox: SandboxHandle, cmd: str, user: str = "root", envs: dict[str, str] | None = None) -> str:
    result = sandbox.exec(cmd, user=user, envs=envs, timeout=60)
    assert result.exit_code == 0, result
    return result.stdout


@pytest.fixture
def sandbox(backend: DockerBackend, image: str) -> Iterator[SandboxHandle]:
    handle = backend.create(SandboxRequest(image=image, rollout_id=f"test-upload-{secrets.token_hex(4)}"))
    try:
        yield handle
    finally:
        handle.kill()


@pytest.mark.docker
@pytest.mark.parametrize("in_env", [True, False], ids=["in-env", "written"])
def test_root_unpacks_and_gives_the_user_exactly_what_its_own_tar_would_have_made(
    backend: DockerBackend, image: str, tmp_path: Path, in_env: bool
) -> None:
    files = upload_files(tmp_path)
    user_dirs = ["/home/agent", "/home/agent/workdir", "/home/agent/task"]
    listings = []
    for as_user in (True, False):
        sandbox = backend.create(SandboxRequest(image=image, rollout_id=f"test-upload-{secrets.token_hex(4)}"))
        try:
            run(sandbox, IMAGE_STATE)
            if as_user:  # the reference: the archive unpacked by the image's user with its own tar
                sandbox.write_bytes("/home/agent/up.tar", tar_archive(files))
                run(sandbox, "tar -x -f ~/up.tar -C / && rm ~/up.tar", user="agent")
            else:
                scratch = "/tmp/agentbake-test"
                made = made_in_user_dirs(files, user_dirs).encode()
                archive = tar_archive({**files, f"{scratch}/made": made}, mode_mask=USER_UMASK_MODES)
                handed = hand_over(sandbox, archive, f"{scratch}.tar", in_env=in_env)
                assert bool(handed.envs) is in_env
                unpack = unpack_command(handed, f"{scratch}/made", "agent")
                unpacked = f"mkdir -m 700 {scratch} && {unpack} && {{ env | grep -c ^{ENV_PREFIX} || :; }}"
                left = run(sandbox, unpacked, envs=dict(handed.envs))
                assert left == "0\n", "the archive's variables outlive the unpack"
                left = run(sandbox, f"ls -A {scratch}; [ -e {scratch}.tar ] || echo gone")
                assert left == "gone\n", "the archive or its lists are left"
            listings.append(run(sandbox, LIST_OWNERS))
        finally:
            sandbox.kill()
    by_user, by_root = listings
    assert by_root == by_user
    # what the comparison rests on: the image's files stay root's, the upload's are the user's
    assert "root:root 644 f /home/agent/workdir/src/keep" in by_root
    assert "root:root 777 d /home/agent/workdir/src" in by_root
    assert "agent:agent 600 f /home/agent/workdir/src/new.py" in by_root
    assert "agent:agent 600 f /home/agent/workdir/old" in by_root
    assert "agent:agent 755 d /home/agent/workdir/deep/er" in by_root
    assert "agent:agent 755 f /home/agent/workdir/tool.sh" in by_root
    assert "agent:agent 600 f /opt/shared/through-the-link/f" in by_root
    assert "root:root 777 d /opt/shared" in by_root


@pytest.mark.docker
@pytest.mark.parametrize("extra", [0, 1], ids=["at-the-cap", "past-the-cap"])
def test_an_archive_up_to_the_cap_rides_in_the_environment_and_a_larger_one_is_written_first(
    sandbox: SandboxHandle, extra: int
) -> None:
    blob = os.urandom(ENV_ARCHIVE_MAX - 16 * 1024)  # incompressible, as base64 sees it
    archive = tar_archive({"/tmp/handed/blob": blob})
    archive += bytes(ENV_ARCHIVE_MAX + extra - len(archive))  # zero blocks after the archive's end: tar stops there
    path = "/tmp/handed.tar"
    handed = hand_over(sandbox, archive, path, in_env=True)
    if extra:
        assert handed.envs == {} and sandbox.exists(path)
    else:
        assert len(handed.envs) > 1 and not sandbox.exists(path)
        assert all(len(f"{name}={value}") < MAX_ARG_STRLEN for name, value in handed.envs.items())
    printed = run(
        sandbox,
        f"{handed.unpack()} && env | grep -c ^{ENV_PREFIX}; sha256sum /tmp/handed/blob; [ -e {path} ] || echo gone",
        envs=dict(handed.envs),
    )
    assert printed.split() == ["0", hashlib.sha256(blob).hexdigest(), "/tmp/handed/blob", "gone"]


@pytest.mark.docker
def test_a_backend_without_large_exec_env_gets_every_archive_written(sandbox: SandboxHandle) -> None:
    handed = hand_over(sandbox, tar_archive({"/tmp/small/f": b"x"}), "/tmp/small.tar", in_env=False)
    assert handed.envs == {} and sandbox.exists("/tmp/small.tar")
    assert run(sandbox, f"{handed.unpack()} && cat /tmp/small/f; ls /tmp/small.tar 2>&1 >/dev/null | wc -l") == "x1\n"


def _archive(files: dict[str, bytes], *, mode: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# Run by the oracle as the image's user: every uploaded file and every directory the archive made in its dirs is
# the user's, with a user's modes (/solution root's, readable); setup.sh ran as root from a scratch dir the user
# cannot read; the archive is gone.
CHECK_AS_THE_USER = r"""
me=$(id -un)
fail() { echo "FAIL: $*" >> "$HOME/upload-check"; }
for p in . deep deep/er deep/er/file.txt tool.sh ../logs/agent/instruction.md; do
  [ "$(stat -c %U "$p")" = "$me" ] || fail "$p is $(stat -c %U "$p")'s"
done
for p in /solution /solution/solve.sh; do  # Harbor's path, root's, readable to the agent
  [ "$(stat -c %U "$p")" = root ] && [ -r "$p" ] || fail "$p is $(stat -c %U "$p")'s or unreadable"
done
[ "$(stat -c %a deep/er)" = 755 ] || fail "deep/er has mode $(stat -c %a deep/er)"
[ "$(stat -c %a tool.sh)" = 755 ] || fail "tool.sh has mode $(stat -c %a tool.sh)"
[ "$(stat -c %a deep/er/file.txt)" = 644 ] || fail "file.txt has mode $(stat -c %a deep/er/file.txt)"
[ "$(cat setup-ran)" = root ] || fail "setup.sh did not run as root"
ls /tmp/agentbake-*.tar 2>/dev/null && fail "the upload archive is left"
for d in /tmp/agentbake-*; do ls "$d" >/dev/null 2>&1 && fail "the scratch dir $d is readable"; done
echo more >> deep/er/file.txt && touch deep/er/new || fail "cannot write in its files"
[ -e "$HOME/upload-check" ] || echo ok > answer
"""


@pytest.fixture(scope="module")
def runner(built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path_factory) -> Iterator[Runner]:
    out = tmp_path_factory.mktemp("out")
    with Runner(RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=out), backend) as runner:
        yield runner


@pytest.mark.docker
def test_the_agents_files_are_its_own_as_if_it_had_unpacked_them(runner: Runner, tmp_path: Path) -> None:
    path = write_task(
        tmp_path,
        "upload-owner",
        solve=CHECK_AS_THE_USER,
        test=reward_if("[ -f answer ]") + "cat $HOME/upload-check 2>/dev/null\n",
        setup="id -un > setup-ran\n",
    )
    environment = path / "environment"
    (environment / "deep" / "er").mkdir(parents=True)
    (environment / "deep" / "er" / "file.txt").write_text("data\n")
    (environment / "tool.sh").write_text("#!/bin/sh\n")
    (environment / "tool.sh").chmod(0o775)
    result = runner.run(load_task(path))
    said = (result.out_dir / "verifier" / "stdout.txt").read_text()
    assert (result.status, result.reward) == (Status.OK, 1.0), (result.error, said)
    assert "+++ b/setup-ran" not in (result.out_dir / "workdir.diff").read_text()  # setup.sh precedes the snapshot


# setup.sh (root, a later command with root_env) and test.sh (root, the command that unpacked tests/) must inherit
# none of the variables an archive rode in; both archives arrive whole.
SAW = f"env | grep -c ^{ENV_PREFIX} || :"  # grep -c exits 1 when it counts none
INHERITS_NONE = reward_if(
    f'[ "$(cat /etc/setup-saw)" = 0 ] && [ "$({SAW})" = 0 ] && sha256sum -c /tests/sums >&2 && '
    "sha256sum -c /tests/workdir-sums >&2"
)


@pytest.mark.docker
def test_small_archives_ride_in_the_environment_and_large_ones_are_written_counted_at_the_engine(
    built_images: dict[str, BuildResult], engine_socket: str, tmp_path: Path
) -> None:
    """Through a relay that counts the engine's archive PUTs: a task of small files gets none, one whose
    environment/ and tests/ each pass `ENV_ARCHIVE_MAX` gets two (each archive written as a file first)."""
    tasks = {}
    for name, size in (("small-files", 1000), ("large-files", ENV_ARCHIVE_MAX + 1)):
        path = write_task(
            tmp_path, name, solve="true\n", test=INHERITS_NONE, setup=f'echo "$({SAW})" > /etc/setup-saw\n'
        )
        blob, answers = os.urandom(size), os.urandom(size)
        (path / "environment" / "blob").write_bytes(blob)
        (path / "tests" / "answers").write_bytes(answers)
        (path / "tests" / "sums").write_text(f"{hashlib.sha256(answers).hexdigest()}  /tests/answers\n")
        (path / "tests" / "workdir-sums").write_text(f"{hashlib.sha256(blob).hexdigest()}  blob\n")
        tasks[name] = load_task(path)
    puts = []
    with FaultyEngine(tmp_path / "engine.sock", engine_socket, r"^PUT /v[\d.]+/containers/[^/]+/archive", 0) as proxy:
        backend = DockerBackend(DockerConfig(memory_mb=512, cpus=1), base_url=proxy.url)
        config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path / "out")
        with Runner(config, backend) as runner:
            for name, task in tasks.items():
                before = proxy.matched
                result = runner.run(task)
                assert (result.status, result.reward) == (Status.OK, 1.0), (name, result.error)
                puts.append(proxy.matched - before)
        backend.close()
    assert puts == [0, 2]
