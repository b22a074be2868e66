"""The Hugging Face backend through the real `huggingface_hub.Sandbox` against a loopback Hub
(tests/runner/fakes/hf_fake.py).

The Jobs API (create = run_job, kill = cancel_job) is the fake's control plane; the sandbox server each
job exposes is served by the same fake at an http loopback URL, reproducing the recorded behaviour of the
real one (commands as root, a timed-out command's `exit_code: null`, background processes listed by
`processes()`). Each job is a local container of the built claude-code image. The fake counts jobs
started and cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import docker
import pytest

from agentbake.errors import SandboxError
from agentbake.runner.remote.hf import ROLLOUT_LABEL, HFBackend, HFSandbox
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.remote.image_facts import ImageFacts
from agentbake.runner.sandbox import SandboxRequest
from tests.runner.fakes.containers import LocalMachines, facts_of
from tests.runner.fakes.hf_fake import FakeHub
from tests.runner.fakes.servers import fake_hub

pytestmark = pytest.mark.docker


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, machines: LocalMachines) -> Iterator[FakeHub]:
    with fake_hub(monkeypatch, machines) as served:
        yield served
        machines.remove_all()


def backend_for(facts: ImageFacts, **config: object) -> HFBackend:
    settings = {"image": facts.ref, "retry_backoff_s": 0, "poll_interval_s": 0.05, **config}
    return HFBackend(HFConfig(**settings), image_facts=facts)


def create(backend: HFBackend, facts: ImageFacts, rollout_id: str = "r-1") -> HFSandbox:
    return backend.create(SandboxRequest(image=facts.ref, rollout_id=rollout_id))


def test_commands_run_as_the_image_user_without_the_server_credential(fake: FakeHub, facts: ImageFacts) -> None:
    with create(backend_for(facts), facts, rollout_id="task-7") as sandbox:
        assert fake.jobs[sandbox.sandbox_id].spec["labels"][ROLLOUT_LABEL] == "task-7"
        assert sandbox.home == "/home/agent"
        as_user = sandbox.exec('id -un; echo "$HOME"; echo "token=${SBX_TOKEN:-}"; echo "x=$X"', envs={"X": "1"})
        assert as_user.stdout.split("\n")[:4] == ["agent", "/home/agent", "token=", "x=1"]
        assert sandbox.exec("grep NoNewPrivs /proc/self/status").stdout.split() == ["NoNewPrivs:", "1"]
        as_root = sandbox.exec('id -un; [ -n "$SBX_TOKEN" ] && echo has-token', user="root")
        assert as_root.stdout.split() == ["root", "has-token"]  # root keeps what the server gave it
        failed = sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (failed.exit_code, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
        assert sandbox.exec("pwd", cwd="/tmp").stdout.strip() == "/tmp"
    assert (fake.created, fake.killed, fake.alive) == (1, 1, 0)


def test_a_timed_out_command_is_exit_124(fake: FakeHub, facts: ImageFacts) -> None:
    with create(backend_for(facts), facts) as sandbox:
        started = time.monotonic()
        result = sandbox.exec("sleep 31", timeout=1)
        assert (result.exit_code, result.timed_out) == (124, True)  # the server said exit_code None
        assert time.monotonic() - started < 10


def test_background_jobs_report_output_and_status_and_time_out(fake: FakeHub, facts: ImageFacts) -> None:
    with create(backend_for(facts), facts) as sandbox:
        done = sandbox.start_bg("id -un; echo err >&2; exit 5").wait(timeout=30)
        assert (done.exit_code, done.stdout, done.stderr) == (5, "agent\n", "err\n")
        job = sandbox.start_bg("sleep 31")
        with pytest.raises(TimeoutError):
            job.wait(timeout=0.5)
        job.kill()
        assert not any(p.running for p in sandbox._sandbox.processes())


def test_a_process_that_vanished_is_an_error_not_exit_0(fake: FakeHub, facts: ImageFacts) -> None:
    with create(backend_for(facts), facts) as sandbox:
        fake.vanish_processes = True
        with pytest.raises(SandboxError, match="vanished"):
            sandbox.start_bg("exit 0").wait(timeout=30)


def test_files_belong_to_the_user_who_wrote_them(fake: FakeHub, facts: ImageFacts) -> None:
    with create(backend_for(facts), facts) as sandbox:
        path = f"{sandbox.home}/new/dir/file.txt"
        sandbox.write_bytes(path, b"content", mode=0o600)
        owners = sandbox.exec(["stat", "-c", "%U %a", path, f"{sandbox.home}/new"], user="root").stdout.split()
        assert owners == ["agent", "600", "agent", "755"]
        assert sandbox.read_bytes(path) == b"content"
        sandbox.write_text("/root/secret", "root's", user="root")
        assert sandbox.exec("cat /root/secret").exit_code != 0
        assert sandbox.exists(path) and not sandbox.exists("/nothing/here")
        with pytest.raises(FileNotFoundError):
            sandbox.read_bytes("/nothing/here")


def test_kill_ends_the_job_even_when_the_first_cancel_fails(fake: FakeHub, facts: ImageFacts) -> None:
    backend = backend_for(facts)
    sandbox = create(backend, facts)
    fake.fail_cancels = 1  # the SDK's kill() logs this and returns: the backend checks and cancels again
    sandbox.kill()
    assert (fake.killed, fake.alive) == (1, 0)
    other = create(backend, facts)
    fake.fail_cancels = 6  # the SDK's cancel and the backend's, on each of its 3 tries
    with pytest.raises(SandboxError, match="after 3 tries"):
        other.kill()
    assert fake.alive == 1
    backend.close()
    assert fake.alive == 0


def test_create_is_retried_bounded_and_leaves_nothing_behind(
    fake: FakeHub, engine: docker.DockerClient, facts: ImageFacts, image: str
) -> None:
    fake.fail_creates = [503]
    with create(backend_for(facts, create_attempts=2), facts):
        pass
    fake.fail_creates = [500, 500, 500]
    with pytest.raises(SandboxError, match="after 2 tries"):
        create(backend_for(facts, create_attempts=2), facts)
    fake.fail_creates = []
    fake.fail_health = True  # the job starts, its server never answers: the SDK cancels it
    with pytest.raises(SandboxError, match="did not become ready"):
        create(backend_for(facts, start_timeout_s=1), facts)
    fake.fail_health = False
    ghost = facts_of(engine, image, user="ghost")  # a failure after create: the backend kills the job
    with pytest.raises(SandboxError, match="ghost"):
        create(backend_for(ghost), ghost)
    assert (fake.created, fake.alive) == (3, 0)


def test_the_image_must_be_pinned(fake: FakeHub, facts: ImageFacts) -> None:
    for moving in ("ghcr.io/org/agentbake/claude-code:latest", "ghcr.io/org/agentbake/claude-code"):
        with pytest.raises(SandboxError, match="never `latest`"):
            create(backend_for(facts, image=moving), facts)
    assert fake.created == 0
