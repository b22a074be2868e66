"""Every sandbox backend by the name `--backend` takes: its config type and its class, both named as
`module:Class` and imported when first asked for, so that naming the backends (`--backend`'s choices, in
`agentbake run --help`) loads neither pydantic nor an SDK. `backend_registry.make_backend` builds them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbake.runner.backend_registry import BackendConfig
    from agentbake.runner.sandbox import SandboxBackend


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
