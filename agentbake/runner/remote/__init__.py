"""The remote backends: E2B (`e2b.py`) and Hugging Face (`hf.py`), what they share (`base.py`), the relay
through which their sandboxes reach each rollout's gateway (`relay.py`) and the gateway run inside a sandbox
(`sandbox_gateway.py`). See docs/remote.md."""

from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.hf import HFBackend
from agentbake.runner.remote.hf_config import HFConfig
from agentbake.runner.remote.relay import RelayConfig

__all__ = ["E2BBackend", "E2BConfig", "HFBackend", "HFConfig", "RelayConfig"]
