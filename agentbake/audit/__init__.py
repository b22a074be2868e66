"""`agentbake audit`: a battery of generic exploits run against each task's verifier, reporting which got a
reward they did not earn.

from agentbake.audit import EXPLOITS, audit_tasks
"""

from agentbake.lazy import lazy_exports

# name -> the module defining it, imported on first use (agentbake/lazy.py)
_EXPORTS = {
    "BY_NAME": "agentbake.audit.exploits",
    "EXPLOITS": "agentbake.audit.exploits",
    "Exploit": "agentbake.audit.exploits",
    "Finding": "agentbake.audit.audit",
    "NOTHING": "agentbake.audit.audit",
    "SOLUTION": "agentbake.audit.audit",
    "TaskAudit": "agentbake.audit.audit",
    "audit_tasks": "agentbake.audit.audit",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
