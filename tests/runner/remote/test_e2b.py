"""The E2B backend through the real `e2b` SDK against a loopback E2B (tests/runner/fakes/e2b_fake.py).

Both planes are on loopback: the control plane by `E2B_API_URL`, envd (commands, files) by
`E2B_SANDBOX_URL`, served with the SDK's own generated Connect-RPC application. Each sandbox is a local
container of the built claude-code image, run the way E2B runs a template: every command may ask for
root, the image's labels are not visible inside. The fake counts sandboxes created and killed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.errors import SandboxError, TaskError
from agentbake.runner.remote.e2b import ROLLOUT_KEY, E2BBackend, E2BSandbox, egress_rules
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.image_facts import ImageFacts
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxRequest
from agentbake.tasks import Task, load_task
from agentbake.tasks.task_network import NetworkPolicy
from tests.runner.fakes.containers import LocalMachines, facts_of
from tests.runner.fakes.e2b_fake import FakeE2B
from tests.runner.fakes.servers import fake_e2b
from tests.runner.rollouts import copy_example

pytestmark = pytest.mark.docker


@pytest.fixture
def template(image: str) -> str:
    return f"claude-code:{image.rsplit(':', 1)[1]}"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, machines: LocalMachines, image: str, template: str) -> Iterator[FakeE2B]:
    with fake_e2b(monkeypatch, machines, {template: (image, "agent")}) as served:
        yield served
        machines.remove_all()


# Exits 0 while `sleep 31` runs in the sandbox (the images have no pgrep; PID 1's child is `sleep infinity`).
SLEEP_RUNS = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -qx 'sleep 31 '"


def backend_for(facts: ImageFacts, template: str, **config: object) -> E2BBackend:
    return E2BBackend(E2BConfig(template=template, retry_backoff_s=0, **config), image_facts=facts)


def create(backend: E2BBackend, facts: ImageFacts, rollout_id: str = "r-1") -> E2BSandbox:
    return backend.create(SandboxRequest(image=facts.ref, rollout_id=rollout_id))


def test_commands_run_as_asked_and_a_failure_is_a_result(fake: FakeE2B, facts: ImageFacts, template: str) -> None:
    backend = backend_for(facts, template)
    with create(backend, facts) as sandbox:
        assert sandbox.home == "/home/agent"  # asked from the sandbox's passwd database
        assert sandbox.exec("id -un").stdout.strip() == "agent"
        assert sandbox.exec(["id", "-un"], user="root").stdout.strip() == "root"
        failed = sandbox.exec("echo out; echo err >&2; exit 3", envs={"X": "1"})
        assert (failed.exit_code, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
        assert sandbox.exec('printf %s "$X"', envs={"X": "set"}, cwd="/tmp").stdout == "set"
        assert sandbox.exec("pwd", cwd=sandbox.paths["workdir"]).stdout.strip() == sandbox.paths["workdir"]
    assert (fake.created, fake.killed, fake.alive) == (1, 1, 0)
    # No command carries the SDK's 60 s default deadline (timeout=0 sends none).
    assert fake.starts and all(start.timeout_ms is None for start in fake.starts)


def test_exec_deadline_is_enforced_in_the_sandbox(fake: FakeE2B, facts: ImageFacts, template: str) -> None:
    with create(backend_for(facts, template), facts) as sandbox:
        started = time.monotonic()
        result = sandbox.exec("sleep 31", timeout=1)
        assert (result.exit_code, result.timed_out) == (124, True)
        assert time.monotonic() - started < 10
        assert sandbox.exec(SLEEP_RUNS, user="root").exit_code == 1  # nothing left running


def test_background_job_wait_times_out_and_kill_stops_it(fake: FakeE2B, facts: ImageFacts, template: str) -> None:
    with create(backend_for(facts, template), facts) as sandbox:
        job = sandbox.start_bg("sleep 31")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            job.wait(timeout=0.5)
        assert time.monotonic() - started < 5
        job.kill()
        assert sandbox.exec(SLEEP_RUNS, user="root").exit_code == 1
        finished = sandbox.start_bg("echo hello; exit 7").wait(timeout=30)
        assert (finished.exit_code, finished.stdout) == (7, "hello\n")


def test_files_are_written_as_their_owner_with_their_mode(fake: FakeE2B, facts: ImageFacts, template: str) -> None:
    with create(backend_for(facts, template), facts) as sandbox:
        path = f"{sandbox.home}/deep/er/file.txt"
        sandbox.write_bytes(path, b"content", mode=0o600)
        assert sandbox.exec(["stat", "-c", "%U %a", path], user="root").stdout.split() == ["agent", "600"]
        assert sandbox.read_bytes(path) == b"content"
        sandbox.write_text("/root/secret", "root's", user="root")
        assert sandbox.exec("cat /root/secret").exit_code != 0  # the agent's user cannot read it
        assert sandbox.exists(path) and not sandbox.exists(f"{sandbox.home}/nothing")
        with pytest.raises(FileNotFoundError):
            sandbox.read_bytes(f"{sandbox.home}/nothing")


def test_metadata_names_the_rollout_and_the_template_is_pinned(fake: FakeE2B, facts: ImageFacts, template: str) -> None:
    with create(backend_for(facts, template), facts, rollout_id="Task_v1.abc123"):
        body = fake.create_bodies[-1]
        assert body["templateID"] == template
        assert body["metadata"][ROLLOUT_KEY] == "Task_v1.abc123"
    for moving in ("claude-code:latest", "claude-code"):
        with pytest.raises(SandboxError, match="never `latest`"):
            create(backend_for(facts, moving), facts)
    assert fake.created == 1


def test_create_retries_transient_errors_a_bounded_number_of_times(
    fake: FakeE2B, facts: ImageFacts, template: str
) -> None:
    fake.fail_creates = [503, 429]
    with create(backend_for(facts, template, create_attempts=3), facts):
        assert len(fake.create_bodies) == 3
    fake.fail_creates = [503] * 5
    with pytest.raises(SandboxError, match="after 2 tries"):
        create(backend_for(facts, template, create_attempts=2), facts)
    fake.fail_creates = []
    with pytest.raises(SandboxError, match="not found"):  # a 404 template is not retried
        create(backend_for(facts, "claude-code:000000000000", create_attempts=3), facts)
    assert len(fake.create_bodies) == 3 + 2 + 1
    assert (fake.created, fake.alive) == (1, 0)


def test_a_create_whose_answer_was_lost_starts_no_second_sandbox(
    fake: FakeE2B, facts: ImageFacts, template: str
) -> None:
    fake.fail_creates_after_start = [502]  # the sandbox started, the answer did not arrive
    with create(backend_for(facts, template), facts) as sandbox:
        assert sandbox.exec("true").exit_code == 0
        assert fake.created == 1  # the retry carried the same idempotency key
    assert fake.alive == 0


def test_a_failure_after_create_kills_the_sandbox(
    fake: FakeE2B, engine: docker.DockerClient, image: str, template: str
) -> None:
    ghost = facts_of(engine, image, user="ghost")  # not in the sandbox's passwd: the home lookup fails
    with pytest.raises(SandboxError, match="ghost"):
        create(backend_for(ghost, template), ghost)
    assert (fake.created, fake.killed, fake.alive) == (1, 1, 0)


def test_a_failed_kill_is_retried_then_an_error_and_close_kills_what_is_left(
    fake: FakeE2B, facts: ImageFacts, template: str
) -> None:
    backend = backend_for(facts, template)
    create(backend, facts).kill()
    fake.fail_kills = 1  # one dropped answer: the kill is tried again
    create(backend, facts).kill()
    assert (fake.killed, fake.alive) == (2, 0)
    sandbox = create(backend, facts)
    fake.fail_kills = 3
    with pytest.raises(SandboxError, match="after 3 tries"):
        sandbox.kill()
    assert fake.alive == 1
    backend.close()
    assert fake.alive == 0
    sandbox.kill()  # twice is fine
    with pytest.raises(SandboxError, match="was killed"):
        sandbox.exec("true")


def network_task(root: Path, verifier_hosts: str) -> Task:
    task = copy_example(root, "write-file", "write-file-rules")
    toml = (task / "task.toml").read_text()
    toml = toml.replace("[agent]\n", '[agent]\nnetwork_mode = "no-network"\n')
    toml = toml.replace("[verifier]\n", f"[verifier]\nallowed_hosts = {verifier_hosts}\n")
    (task / "task.toml").write_text(toml)
    return load_task(task)


def test_each_phases_policy_becomes_the_sandboxs_egress_rules(
    fake: FakeE2B, image: str, template: str, tmp_path: Path
) -> None:
    task = network_task(tmp_path, '["pypi.org", "10.0.0.0/8"]')
    config = RunnerConfig(image=image, oracle=True, out_dir=tmp_path / "out")
    with Runner(config, E2BConfig(template=template)) as runner:
        result = runner.run(task)
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error
    [create] = fake.create_bodies
    assert create["network"] == {"denyOut": ["0.0.0.0/0"]}  # the agent's no-network (the oracle needs no relay)
    [(sandbox_id, update)] = fake.network_updates  # once the agent is dead: the verifier's allowlist
    assert sandbox_id.startswith("fake")
    assert update == {"denyOut": ["0.0.0.0/0"], "allowOut": ["pypi.org", "10.0.0.0/8"]}
    # With an agent, the relay to its gateway is the one address its no-network phase reaches.
    relay = egress_rules(NetworkPolicy("no-network"), ["relay.example.org"])
    assert relay == {"deny_out": ["0.0.0.0/0"], "allow_out": ["relay.example.org"]}
    assert egress_rules(NetworkPolicy("public"), ["relay.example.org"]) is None


def test_a_wildcard_host_is_refused_on_e2b_naming_the_fix(
    fake: FakeE2B, image: str, template: str, tmp_path: Path
) -> None:
    task = network_task(tmp_path, '["*.pythonhosted.org"]')
    refused = pytest.raises(TaskError, match=r"\*.pythonhosted.org, which the e2b backend's egress rules cannot say")
    config = RunnerConfig(image=image, oracle=True, out_dir=tmp_path)
    with Runner(config, E2BConfig(template=template)) as runner, refused:
        runner.run(task)
    assert fake.created == 0
