"""Capabilities: what only some backends can do is said on the protocol and checked, never probed for."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbake.errors import SandboxError
from agentbake.runner import Runner, RunnerConfig
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.result import Status
from agentbake.runner.sandbox import Capabilities, SandboxBackend, SandboxRequest
from agentbake.tasks import load_task
from tests.runner.rollouts import EXAMPLES

pytestmark = pytest.mark.docker


def test_each_backend_says_what_it_can_do() -> None:
    assert SandboxBackend.capabilities == Capabilities()
    assert DockerBackend.capabilities == Capabilities(
        warm_pool=True, task_images=True, network_phases=True, large_exec_env=True, verifier_sandbox=True
    )
    assert HFBackend.capabilities == Capabilities(gateway_in_sandbox=True, task_images=True)
    assert E2BBackend.capabilities == Capabilities(gateway_in_sandbox=True, task_images=True, egress_rules=True)


def test_a_backend_without_a_warm_pool_says_so() -> None:
    backend = E2BBackend(E2BConfig(template="t:abc"))
    try:
        with pytest.raises(SandboxError, match="the e2b backend keeps no warm pool"):
            backend.warm_up(SandboxRequest(image="agentbake/claude-code:0", rollout_id="capabilities"))
    finally:
        backend.close()


def test_a_docker_sandbox_cannot_run_a_step_before_its_kill(backend: DockerBackend, image: str) -> None:
    sandbox = backend.create(SandboxRequest(image=image, rollout_id="test-capabilities-kill"))
    try:
        with pytest.raises(SandboxError, match=f"sandbox {sandbox.sandbox_id} cannot run a step before it is killed"):
            sandbox.before_kill(lambda: None)
    finally:
        sandbox.kill()


def test_a_docker_sandbox_made_without_a_verifier_network_cannot_join_one(backend: DockerBackend, image: str) -> None:
    sandbox = backend.create(SandboxRequest(image=image, rollout_id="test-capabilities-network"))
    try:
        with pytest.raises(SandboxError, match="was not made for a network"):
            sandbox.connect_network()
        assert sandbox.exec("ls /sys/class/net").stdout.split() == ["lo"]
    finally:
        sandbox.kill()


def test_the_gateway_in_a_docker_sandbox_is_a_clear_sandbox_error(
    backend: DockerBackend, image: str, tmp_path: Path
) -> None:
    config = RunnerConfig(
        image=image, model="http://127.0.0.1:9/v1", model_name="m", gateway="sandbox", out_dir=tmp_path
    )
    with Runner(config, backend) as runner:
        result = runner.run(load_task(EXAMPLES / "write-file"))
    assert result.status is Status.SANDBOX_ERROR
    assert "the docker backend cannot run the gateway in the sandbox" in (result.error or "")
    assert backend.live() == []
