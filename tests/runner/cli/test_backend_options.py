"""The backend config the `--backend` options make (BackendChoice.config), without an engine; the options on the
command line: tests/runner/cli/test_remote_cli.py."""

from __future__ import annotations

import pytest

from agentbake.errors import SandboxError
from agentbake.runner.cli.backend_options import BackendChoice
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.relay_config import RelayConfig


def test_warm_is_the_docker_backends_pool_and_refused_for_the_others() -> None:
    assert BackendChoice(warm=3).config() == DockerConfig(warm=3)
    assert BackendChoice("e2b", relay_listen="0.0.0.0:8900").config() == E2BConfig(
        relay=RelayConfig(listen_host="0.0.0.0", listen_port=8900)
    )
    with pytest.raises(SandboxError, match="--warm keeps Docker sandboxes started; the hf backend has no warm pool"):
        BackendChoice("hf", warm=1).config()
