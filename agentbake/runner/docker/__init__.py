"""The Docker backend. Modules import downward only: `labels.py`, `config.py` -> `engine.py` -> `sandbox.py`,
`warm_pool.py` -> `backend.py` (`DockerBackend`); `gc.py` (labels, config) and `forwarder.py` (the relay
run inside each sandbox, copied there from its file) stand apart."""

from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig

__all__ = ["DockerBackend", "DockerConfig"]
