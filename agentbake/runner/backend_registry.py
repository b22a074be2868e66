"""One way to build any sandbox backend: each has one pydantic config type, and `make_backend(config)` makes
the backend that config type belongs to. The Runner's own Docker backend and the CLI's `--backend` both go
through it. The backends by name, `BACKENDS`, are `backend_kinds.py`'s (no pydantic: `--backend`'s choices).

    make_backend(DockerConfig(warm=4))          # DockerBackend
    make_backend(E2BConfig(template="t:abc"))   # E2BBackend
    BACKENDS["hf"].config(manifest=path)        # HFConfig, by the name `--backend` takes
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Any

from agentbake.errors import ConfigError
from agentbake.runner.backend_kinds import BACKENDS as BACKENDS  # re-exported: `agentbake.runner.BACKENDS`

if TYPE_CHECKING:
    from agentbake.runner.docker.config import DockerConfig
    from agentbake.runner.remote.e2b_config import E2BConfig
    from agentbake.runner.remote.hf_config import HFConfig
    from agentbake.runner.sandbox import SandboxBackend

    BackendConfig = DockerConfig | E2BConfig | HFConfig
    """The settings of one backend; its type says which backend."""
else:

    def __getattr__(name: str) -> Any:
        """`BackendConfig` (the union of every backend's config type) made when first asked for: a Docker run's
        runner imports no remote backend's config (PEP 562)."""
        if name != "BackendConfig":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return functools.reduce(operator.or_, (kind.config for kind in BACKENDS.values()))


def make_backend(config: BackendConfig) -> SandboxBackend:
    """The backend `config` configures (`DockerConfig` -> `DockerBackend`, ...), ready for `create`."""
    for kind in BACKENDS.values():
        if isinstance(config, kind.config):
            return kind.backend(config)
    known = ", ".join(kind.config.__name__ for kind in BACKENDS.values())
    raise ConfigError(f"{type(config).__name__} configures no sandbox backend; pass one of {known}")
