"""The backend config the `--backend` options make (BackendChoice.config), and a job's backend with the runtime
options of a resume, without an engine; the options on the command line: tests/runner/cli/test_remote_cli.py."""

from __future__ import annotations

import click
import pytest

from agentbake.errors import SandboxError
from agentbake.runner.cli.backend_options import BackendChoice
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.job import JobBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.remote.relay_config import RelayConfig


def test_warm_is_the_docker_backends_pool_and_refused_for_the_others() -> None:
    assert BackendChoice(warm=3).config() == DockerConfig(warm=3)
    assert BackendChoice("e2b", relay_listen="0.0.0.0:8900").config() == E2BConfig(
        relay=RelayConfig(listen_host="0.0.0.0", listen_port=8900)
    )
    with pytest.raises(SandboxError, match="--warm keeps Docker sandboxes started; the hf backend has no warm pool"):
        BackendChoice("hf", warm=1).config()
    with pytest.raises(click.BadParameter, match=r"'0.0.0.0:99999': expected HOST:PORT \(a port up to 65535\)"):
        BackendChoice("e2b", relay_listen="0.0.0.0:99999").config()
    assert BackendChoice("hf", manifest=None).job_backend() == JobBackend(name="hf", config=HFConfig())


def test_a_resume_changes_only_the_runtime_options_given() -> None:
    relay = RelayConfig(listen_host="0.0.0.0", listen_port=8900, public_url="https://relay.example")
    stored = JobBackend(name="hf", config=HFConfig(flavor="t4-small", relay=relay))
    given = BackendChoice("hf", relay_listen="127.0.0.1:9000", relay_url="https://other.example")
    assert given.with_runtime(stored, {"relay_listen"}).config == HFConfig(
        flavor="t4-small", relay=RelayConfig(listen_host="127.0.0.1", listen_port=9000, public_url=relay.public_url)
    )
    assert given.with_runtime(stored, {"relay_url"}).config.relay == relay.model_copy(
        update={"public_url": "https://other.example"}
    )
    assert given.with_runtime(stored, set()) == stored
    with pytest.raises(SandboxError, match="the hf backend has no warm pool"):
        BackendChoice(warm=2).with_runtime(stored, {"warm"})
    docker = JobBackend(config=DockerConfig(cpus=1.0))
    assert BackendChoice(warm=2).with_runtime(docker, {"warm", "relay_url"}).config == DockerConfig(cpus=1.0, warm=2)
