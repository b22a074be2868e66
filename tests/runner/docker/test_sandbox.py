"""The Docker backend against the real engine and a real catalog image: commands, files, lifetime."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import docker
import pytest

from agentbake.errors import SandboxError
from agentbake.runner.docker import labels
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.docker.sandbox import DockerSandbox
from agentbake.runner.sandbox import SandboxRequest
from agentbake.runner.sandbox.copyout import CopyBudget
from agentbake.runner.sandbox.output import MAX_OUTPUT_BYTES

RUN = secrets.token_hex(3)  # rollout ids unique per session: other sessions share the engine


@pytest.fixture(scope="module")
def sandbox(backend: DockerBackend, image: str) -> DockerSandbox:
    return backend.create(SandboxRequest(image=image, rollout_id="test-docker", envs={"ROLLOUT_VAR": "from-request"}))


def test_exec_runs_as_the_image_user_in_its_workdir(sandbox: DockerSandbox) -> None:
    result = sandbox.exec("id -un; pwd; echo $ROLLOUT_VAR $CALL_VAR", envs={"CALL_VAR": "from-call"})
    assert result.exit_code == 0
    assert result.stdout.split("\n")[:3] == [sandbox.user, sandbox.paths["workdir"], "from-request from-call"]
    assert sandbox.user == "agent" and sandbox.home == "/home/agent"
    assert set(sandbox.paths) >= {"workdir", "task", "logs_agent", "logs_verifier"}


def test_exec_exit_code_stderr_cwd_and_root(sandbox: DockerSandbox) -> None:
    result = sandbox.exec(["sh", "-c", "pwd; id -u; echo oops >&2; exit 3"], cwd="/tmp", user="root")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "/tmp\n0\n", "oops\n", False)


def test_timeout_kills_the_command_and_its_children(sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("sleep 30 & sleep 30; echo never", timeout=1)
    assert time.monotonic() - started < 5
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "")
    left = sandbox.exec("grep -l '^sleep' /proc/[0-9]*/cmdline 2>/dev/null | wc -l", user="root")
    assert left.stdout.strip() == "0", "a timed-out command left processes running"


def test_a_command_ending_by_itself_within_its_timeout_is_not_timed_out(sandbox: DockerSandbox) -> None:
    assert sandbox.exec("exit 137", timeout=5) == sandbox.exec("exit 137")
    assert sandbox.exec("exit 137").exit_code == 137


def test_background_job_wait_timeout_and_kill(sandbox: DockerSandbox) -> None:
    job = sandbox.start_bg("echo started; echo warn >&2; sleep 0.2; exit 5")
    assert job.pid > 1
    assert job.wait(10) == type(job.wait(10))(5, "started\n", "warn\n")

    sleeper = sandbox.start_bg(["sh", "-c", "sleep 60 & sleep 60"])
    with pytest.raises(TimeoutError):
        sleeper.wait(0.3)
    sleeper.kill()
    assert sleeper.wait(5).exit_code == 137
    sleeper.kill()  # already ended: nothing happens
    assert sandbox.exec("grep -l '^sleep' /proc/[0-9]*/cmdline 2>/dev/null | wc -l", user="root").stdout.strip() == "0"


def test_a_background_command_that_cannot_start_says_why(sandbox: DockerSandbox) -> None:
    with pytest.raises(SandboxError, match=r"did not start: .*/no/such/dir"):
        sandbox.start_bg("true", cwd="/no/such/dir")


def test_files_roundtrip_with_owner_mode_and_parents(sandbox: DockerSandbox) -> None:
    path = f"{sandbox.home}/new/deeper/file.bin"
    data = bytes(range(256)) * 10
    sandbox.write_bytes(path, data, mode=0o600)
    assert sandbox.read_bytes(path) == data
    listing = sandbox.exec(f"stat -c '%U %a %n' {sandbox.home}/new {sandbox.home}/new/deeper {path}").stdout.split("\n")
    assert listing[:3] == [f"agent 755 {sandbox.home}/new", f"agent 755 {sandbox.home}/new/deeper", f"agent 600 {path}"]

    sandbox.write_text("/srv/root-owned/x.txt", "héllo\n", user="root")
    assert sandbox.read_text("/srv/root-owned/x.txt") == "héllo\n"
    assert sandbox.exec("stat -c '%U' /srv/root-owned /srv/root-owned/x.txt").stdout == "root\nroot\n"
    assert sandbox.exists("/srv/root-owned") and sandbox.exists(path)
    assert not sandbox.exists("/srv/absent")


def test_file_errors(sandbox: DockerSandbox) -> None:
    with pytest.raises(FileNotFoundError, match="/nowhere/file"):
        sandbox.read_bytes("/nowhere/file")
    with pytest.raises(IsADirectoryError):
        sandbox.read_bytes("/etc")
    with pytest.raises(SandboxError, match="must be absolute"):
        sandbox.write_text("relative.txt", "x")
    sandbox.exec("ln -sf /etc/passwd /tmp/link && head -c 70000000 /dev/zero > /tmp/big")
    with pytest.raises(FileNotFoundError, match="/tmp/link is a symlink \\(to '/etc/passwd'\\), not read"):
        sandbox.read_bytes("/tmp/link")
    with pytest.raises(SandboxError, match="/tmp/big is 70000000 bytes, more than 67108864 read"):
        sandbox.read_bytes("/tmp/big")
    assert sandbox.exec("echo still here").stdout == "still here\n"  # the archive stream was closed


def test_copy_out_all_copies_in_turn_under_one_budget_a_failing_path_is_a_note(
    sandbox: DockerSandbox, tmp_path: Path
) -> None:
    """Each archive asked for once the one before is closed: the engine holds the container's lock until then, so
    a later archive larger than the socket's buffers asked for at once could take the lock first and wait, unread,
    for the earlier one (a 120 s read timeout, the logs lost)."""
    sandbox.exec(
        "mkdir -p /tmp/all/a /tmp/all/b /tmp/all/big && for f in 1 2 3; do head -c 3000 /dev/urandom > /tmp/all/a/$f; "
        "head -c 3000 /dev/urandom > /tmp/all/b/$f; done && ln -s /etc/passwd /tmp/all/b/link && "
        "head -c 8000000 /dev/urandom > /tmp/all/big/file"
    )
    out, budget = tmp_path / "out", CopyBudget(bytes=12_000, files=20)  # a whole, b stopped after its first file
    sources = [("/tmp/all/a", out / "a"), ("/tmp/none", out / "none"), ("relative", out / "r")]
    sources.append(("/tmp/all/b", out / "b"))
    started = time.monotonic()
    sandbox.copy_out_all(sources, budget)
    notes = budget.finish()
    files = [p.relative_to(out).as_posix() for p in sorted(out.rglob("*")) if p.is_file()]
    assert files == ["a/1", "a/2", "a/3", "b/1"]
    assert notes[0].startswith("relative: not collected:") and "must be absolute" in notes[0]
    assert any("most bytes a rollout may collect" in n for n in notes) and not (out / "none").exists()

    budget = CopyBudget()
    sandbox.copy_out_all([("/tmp/all/a", out / "again"), ("/tmp/all/big", out / "big")], budget)
    assert (out / "big" / "file").stat().st_size == 8_000_000 and budget.finish() == []
    assert time.monotonic() - started < 30
    assert sandbox.exec("echo still here").stdout == "still here\n"  # every archive stream was closed


def test_output_is_kept_to_its_first_and_last_megabytes(sandbox: DockerSandbox) -> None:
    """100 MB on stdout costs the runner 8 MiB: the start and the end, and how much was cut between."""
    loud = sandbox.exec("echo first; head -c 100000000 /dev/zero | tr '\\0' y; echo; echo last >&2; echo last")
    assert loud.exit_code == 0 and loud.stderr == "last\n"
    assert loud.stdout.startswith("first\nyyy") and loud.stdout.endswith("yyy\nlast\n")
    assert len(loud.stdout) < MAX_OUTPUT_BYTES + 100
    assert f"[agentbake: {100000012 - MAX_OUTPUT_BYTES} bytes of output cut here]" in loud.stdout


def test_disk_usage_counts_what_was_written_and_restart_keeps_files_kills_processes(sandbox: DockerSandbox) -> None:
    before = sandbox.disk_usage()
    assert before is not None
    sandbox.exec("head -c 20000000 /dev/urandom > /tmp/written && truncate -s 1G /tmp/sparse")
    after = sandbox.disk_usage()
    assert after is not None and after - before >= 20000000 + 2**30  # apparent sizes: the sparse file in full
    job = sandbox.start_bg("sleep 300")
    sandbox.restart()
    assert sandbox.exec("stat -c %s /tmp/written").stdout == "20000000\n"
    assert sandbox.exec(f"kill -0 {job.pid} 2>/dev/null || echo gone").stdout == "gone\n"
    sandbox.exec("rm -f /tmp/written /tmp/sparse")


def test_kill_removes_the_container_and_is_idempotent(
    backend: DockerBackend, image: str, engine: docker.DockerClient
) -> None:
    sandbox = backend.create(SandboxRequest(image=image, rollout_id=f"test-docker-kill-{RUN}"))
    found = engine.containers.list(filters={"label": f"{labels.ROLLOUT}=test-docker-kill-{RUN}"})
    assert [c.id for c in found] == [sandbox.sandbox_id]
    assert found[0].labels[labels.OWNER] == labels.this_process()
    assert int(found[0].labels[labels.EXPIRES]) > time.time()
    host_dir = backend.config.runtime_dir / sandbox.name
    assert host_dir.is_dir()
    sandbox.kill()
    sandbox.kill()
    assert engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}=test-docker-kill-{RUN}"}) == []
    assert not host_dir.exists()
    with pytest.raises(SandboxError, match="was killed"):
        sandbox.exec("true")


def test_create_refuses_a_missing_image_and_leaves_nothing(backend: DockerBackend, engine: docker.DockerClient) -> None:
    with pytest.raises(SandboxError, match="agentbake build"):
        backend.create(SandboxRequest(image="agentbake/absent:000000000000", rollout_id=f"test-docker-absent-{RUN}"))
    assert engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}=test-docker-absent-{RUN}"}) == []


def test_create_refuses_to_run_the_agent_as_root(image: str) -> None:
    with pytest.raises(SandboxError, match="non-root user"):
        DockerBackend(DockerConfig(user="root")).create(SandboxRequest(image=image, rollout_id="test-docker-root"))


def test_a_closed_backend_creates_nothing(image: str, engine: docker.DockerClient) -> None:
    backend = DockerBackend(DockerConfig(memory_mb=256))
    backend.close()
    with pytest.raises(SandboxError, match="closed"):
        backend.create(SandboxRequest(image=image, rollout_id=f"test-docker-closed-{RUN}"))
    assert engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}=test-docker-closed-{RUN}"}) == []
