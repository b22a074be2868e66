"""The Docker backend. Modules import downward only: `labels.py`, `config.py` -> `engine.py` -> `sandbox.py`,
`warm_pool.py` -> `backend.py` (`DockerBackend`); `gc.py` (labels, config) and `forwarder.py` (the relay
run inside each sandbox, copied there from its file) stand apart."""

from agentbake.lazy import lazy_exports

# name -> the module defining it, imported on first use (agentbake/lazy.py)
_EXPORTS = {
    "DockerBackend": "agentbake.runner.docker.backend",
    "DockerConfig": "agentbake.runner.docker.config",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
