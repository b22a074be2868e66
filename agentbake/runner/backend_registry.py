"""One way to build any sandbox backend: `make_backend(config)` makes the backend of that config type.

The Runner and the CLI's `--backend` both use it. `BACKENDS` names each config type and class as `module:Class`,
imported when first asked for, so `--help` loads neither pydantic nor an SDK.

    make_backend(DockerConfig(warm=4))          # DockerBackend
    make_backend(E2BConfig(template="t:abc"))   # E2BBackend
    BACKENDS["hf"].config(manifest=path)        # HFConfig, by the name `--backend` takes
"""

from __future__ import annotations

import functools
import importlib
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentbake.errors import ConfigError

if TYPE_CHECKING:
    from agentbake.runner.docker.config import DockerConfig
    from agentbake.runner.remote.e2b_config import E2BConfig
    from agentbake.runner.remote.hf_config import HFConfig
    from agentbake.runner.sandbox import SandboxBackend

    BackendConfig = DockerConfig | E2BConfig | HFConfig
    """The settings of one backend; its type says which backend."""
else:

    def __getattr__(name: str) -> Any:
        """`BackendConfig`, the union of every backend's config type, made when first asked for (PEP 562)."""
        if name != "BackendConfig":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return functools.reduce(operator.or_, (kind.config for kind in BACKENDS.values()))


def _load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class BackendKind:
    """One backend: its name (`--backend NAME`), its config type and its class (built from that config)."""

    name: str
    config_class: str
    """`module:Class` of its pydantic config."""
    backend_class: str
    """`module:Class` of the backend."""

    @property
    def config(self) -> type[BackendConfig]:
        return _load(self.config_class)

    @property
    def backend(self) -> type[SandboxBackend]:
        return _load(self.backend_class)


BACKENDS: dict[str, BackendKind] = {
    kind.name: kind
    for kind in (
        BackendKind(
            "docker", "agentbake.runner.docker.config:DockerConfig", "agentbake.runner.docker.backend:DockerBackend"
        ),
        BackendKind("e2b", "agentbake.runner.remote.e2b_config:E2BConfig", "agentbake.runner.remote.e2b:E2BBackend"),
        BackendKind("hf", "agentbake.runner.remote.hf_config:HFConfig", "agentbake.runner.remote.hf:HFBackend"),
    )
}
"""Every backend by name."""
DEFAULT_BACKEND = "docker"


def make_backend(config: BackendConfig) -> SandboxBackend:
    """The backend `config` configures (`DockerConfig` -> `DockerBackend`, ...), ready for `create`."""
    return backend_type(config)(config)


def backend_type(config: BackendConfig) -> type[SandboxBackend]:
    """The class of the backend `config` configures (its `name` and `capabilities`, without building it)."""
    for kind in BACKENDS.values():
        if isinstance(config, kind.config):
            return kind.backend
    known = ", ".join(kind.config.__name__ for kind in BACKENDS.values())
    raise ConfigError(f"{type(config).__name__} configures no sandbox backend; pass one of {known}")
