"""The remote backends: E2B (`e2b.py`), Hugging Face (`hf.py`) and what they share (`base.py`, and
`image_facts.py`: what they know of the image they start).

Their sandboxes reach each rollout's gateway through `relay.py`, or run it inside (`sandbox_gateway.py`). See
docs/remote.md.
"""

from agentbake.lazy import lazy_exports

# name -> the module defining it, imported on first use (agentbake/lazy.py)
_EXPORTS = {
    "E2BBackend": "agentbake.runner.remote.e2b",
    "E2BConfig": "agentbake.runner.remote.e2b_config",
    "HFBackend": "agentbake.runner.remote.hf",
    "HFConfig": "agentbake.runner.remote.hf_config",
    "RelayConfig": "agentbake.runner.remote.relay_config",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
