"""The steps of one rollout inside a sandbox, the same for every agent and backend (`steps.Harness`)."""

from agentbake.lazy import lazy_exports

# name -> the module defining it, imported on first use (agentbake/lazy.py)
_EXPORTS = {
    "Harness": "agentbake.runner.harness.steps",
    "HarnessOutcome": "agentbake.runner.harness.outcome",
    "describe_error": "agentbake.runner.harness.outcome",
    "oracle_launch": "agentbake.runner.harness.steps",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
