"""Parity: one example task through the Docker backend and through each remote backend gives the same rollout.

The remote side is the real E2B / Hugging Face backend over its loopback fake (tests/runner/fakes/), whose
sandboxes are local containers behaving as remote ones do: every command may run as root and a Hugging
Face one runs as root unless the backend drops privileges, the home comes from the sandbox's passwd
database, and no image label is visible inside. Same task, same image, same scripted model: the files in
out/, the exit codes, the status, the reward and the shape of the trace must match the Docker rollout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.result import RolloutResult
from agentbake.runner.runner import run_rollout
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxBackend
from agentbake.tasks import load_task
from tests.runner.fakes.containers import LocalMachines, remove_leftovers
from tests.runner.fakes.servers import fake_e2b, fake_hub
from tests.runner.rollouts import EXAMPLES

pytestmark = pytest.mark.docker

TASK = EXAMPLES / "multi-step-report"  # several tool calls, files created, a verifier with its own log


@pytest.fixture(scope="module")
def machines(engine: docker.DockerClient) -> Iterator[LocalMachines]:
    local = LocalMachines(network_mode="host")
    yield local
    local.remove_all()
    assert remove_leftovers(local) == 0


@pytest.fixture(scope="module")
def docker_rollout(image: str, tmp_path_factory: pytest.TempPathFactory) -> RolloutResult:
    return rollout(image, None, tmp_path_factory.mktemp("docker"))


def rollout(image: str, backend: SandboxBackend | None, out: Path) -> RolloutResult:
    config = RunnerConfig(image=image, model="scripted", out_dir=out)
    try:
        return run_rollout(load_task(TASK), config, backend=backend)
    finally:
        if backend is not None:
            backend.close()


def files(result: RolloutResult) -> dict[str, bytes]:
    """What the rollout left in out/<id>/, by path, minus what names the run (ids, timings, the agent's own
    session records, whose names are ids) and what is derived from the trace (compared by `trace_shape`)."""
    assert result.out_dir is not None
    found = {}
    for path in sorted(result.out_dir.rglob("*")):
        relative = path.relative_to(result.out_dir).as_posix()
        if path.is_file() and relative.split("/")[0] not in ("agent", "result.json", "trace.jsonl", "sequences.json"):
            found[relative] = path.read_bytes()
    return found


def trace_shape(result: RolloutResult) -> list[tuple[object, ...]]:
    """Per model call: the record's fields, its dialect and status, how it ended, the tools it called and the
    commands it ran, and whether token ids came."""
    assert result.out_dir is not None
    shape = []
    for line in (result.out_dir / "trace.jsonl").read_text().splitlines():
        record = json.loads(line)
        message = (record["response"] or {}).get("choices", [{}])[0].get("message", {})
        calls = tuple(
            (call["function"]["name"], json.loads(call["function"]["arguments"]).get("command"))
            for call in message.get("tool_calls") or []
        )
        ended = (record["dialect"], record["upstream_status"], record["finish_reason"])
        shape.append((tuple(sorted(record)), ended, calls, bool(record["completion_token_ids"])))
    return shape


@pytest.mark.parametrize("backend", ["e2b", "hf"])
def test_a_remote_rollout_equals_the_docker_rollout(
    backend: str,
    docker_rollout: RolloutResult,
    monkeypatch: pytest.MonkeyPatch,
    machines: LocalMachines,
    image: str,
    tmp_path: Path,
) -> None:
    template = f"claude-code:{image.rsplit(':', 1)[1]}"
    if backend == "e2b":
        with fake_e2b(monkeypatch, machines, {template: (image, "agent")}) as fake:
            remote = rollout(image, E2BBackend(E2BConfig(template=template)), tmp_path)
    else:
        with fake_hub(monkeypatch, machines) as fake:
            remote = rollout(image, HFBackend(HFConfig(image=image)), tmp_path)
    assert (fake.created, fake.alive) == (1, 0)

    assert docker_rollout.status.value == "ok" and docker_rollout.reward == 1.0
    compared = ("status", "reward", "exit_code", "verifier_exit_code", "turns", "calls_without_token_ids", "error")
    assert {k: getattr(remote, k) for k in compared} == {k: getattr(docker_rollout, k) for k in compared}
    assert files(remote) == files(docker_rollout)  # workdir.diff, setup and verifier output, verifier logs
    assert trace_shape(remote) == trace_shape(docker_rollout)
    assert remote.trace and all(record.rollout_id == remote.rollout_id for record in remote.trace)
