"""One way to build any backend: `make_backend(config)` by the config's type, `BACKENDS` by name."""

from __future__ import annotations

import pytest

from agentbake.errors import ConfigError
from agentbake.runner import BACKENDS, Runner, RunnerConfig, make_backend
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.remote.relay import RelayConfig


def test_each_name_is_its_backends_name_and_config() -> None:
    assert {name: (kind.config, kind.backend) for name, kind in BACKENDS.items()} == {
        "docker": (DockerConfig, DockerBackend),
        "e2b": (E2BConfig, E2BBackend),
        "hf": (HFConfig, HFBackend),
    }
    assert all(kind.backend.name == name for name, kind in BACKENDS.items())


def test_make_backend_builds_the_backend_its_config_configures(engine: object) -> None:
    docker = make_backend(DockerConfig(warm=1, memory_mb=512))
    try:
        assert isinstance(docker, DockerBackend)
        assert (docker.config.warm, docker.pool.size) == (1, 1)
    finally:
        docker.close()
    relay = RelayConfig(listen_port=0)
    e2b = make_backend(E2BConfig(template="t:abc", relay=relay))
    hf = make_backend(HFConfig(flavor="cpu-upgrade", relay=relay))
    assert isinstance(e2b, E2BBackend) and e2b.config.template == "t:abc"
    assert isinstance(hf, HFBackend) and hf.config.flavor == "cpu-upgrade"
    e2b.close()
    hf.close()


def test_a_config_of_no_backend_names_the_ones_that_are() -> None:
    with pytest.raises(
        ConfigError, match="RelayConfig configures no sandbox backend; pass one of DockerConfig, E2BConfig"
    ):
        make_backend(RelayConfig())  # type: ignore[arg-type]


def test_the_runner_builds_a_backend_from_its_config_and_closes_it(built_images: dict, engine: object) -> None:
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True)
    with Runner(config, DockerConfig(warm=2, memory_mb=512)) as runner:
        backend = runner.backend
        assert isinstance(backend, DockerBackend) and backend.pool.size == 2
    assert backend._closed
    with Runner(config) as runner:  # no backend: Docker, warm as the RunnerConfig says
        assert isinstance(runner.backend, DockerBackend) and runner.backend.pool.size == 0


def test_runner_config_warm_is_deprecated_and_a_backend_with_another_pool_is_refused(
    built_images: dict, engine: object
) -> None:
    """DockerConfig.warm is the setting; RunnerConfig.warm still makes the Runner's own Docker backend's pool."""
    tag = built_images["claude-code"].tag
    with pytest.warns(DeprecationWarning, match=r"RunnerConfig.warm is deprecated: .* pass DockerConfig\(warm=2\)"):
        config = RunnerConfig(image=tag, oracle=True, warm=2)
    for other in (DockerConfig(), E2BConfig(template="t:1")):
        with pytest.raises(ConfigError, match=r"RunnerConfig.warm=2 \(deprecated\) differs from the given backend's"):
            Runner(config, other)
    with Runner(config) as runner:  # no backend: the Runner's Docker backend keeps the pool asked for
        assert isinstance(runner.backend, DockerBackend) and runner.backend.pool.size == 2
    with Runner(config, DockerConfig(warm=2, memory_mb=512)) as runner:  # the same pool: only the warning
        assert isinstance(runner.backend, DockerBackend) and runner.backend.pool.size == 2
