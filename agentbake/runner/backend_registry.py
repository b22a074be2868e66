"""One way to build any sandbox backend: each has one pydantic config type, and `make_backend(config)` makes
the backend that config type belongs to. The Runner's own Docker backend and the CLI's `--backend` both go
through it.

    make_backend(DockerConfig(warm=4))          # DockerBackend
    make_backend(E2BConfig(template="t:abc"))   # E2BBackend
    BACKENDS["hf"].config(manifest=path)        # HFConfig, by the name `--backend` takes
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentbake.errors import ConfigError
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf_config import HFConfig

if TYPE_CHECKING:
    from agentbake.runner.sandbox import SandboxBackend

BackendConfig = DockerConfig | E2BConfig | HFConfig
"""The settings of one backend; its type says which backend."""


@dataclass(frozen=True)
class BackendKind:
    """One backend: its name (`--backend NAME`), its config type and its class (built from that config). The
    class is imported when first asked for: naming the backends (`--backend`'s choices) loads no SDK."""

    name: str
    config: type[BackendConfig]
    backend_class: str
    """`module:Class` of the backend."""

    @property
    def backend(self) -> type[SandboxBackend]:
        module, name = self.backend_class.split(":")
        return getattr(importlib.import_module(module), name)


BACKENDS: dict[str, BackendKind] = {
    kind.name: kind
    for kind in (
        BackendKind("docker", DockerConfig, "agentbake.runner.docker.backend:DockerBackend"),
        BackendKind("e2b", E2BConfig, "agentbake.runner.remote.e2b:E2BBackend"),
        BackendKind("hf", HFConfig, "agentbake.runner.remote.hf:HFBackend"),
    )
}
"""Every backend by name."""


def make_backend(config: BackendConfig) -> SandboxBackend:
    """The backend `config` configures (`DockerConfig` -> `DockerBackend`, ...), ready for `create`."""
    for kind in BACKENDS.values():
        if isinstance(config, kind.config):
            return kind.backend(config)
    known = ", ".join(kind.config.__name__ for kind in BACKENDS.values())
    raise ConfigError(f"{type(config).__name__} configures no sandbox backend; pass one of {known}")
