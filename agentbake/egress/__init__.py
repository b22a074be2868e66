"""Per-sandbox egress: an allowlist proxy for each phase and a host-side cache no sandbox can write (README)."""

from agentbake.egress.allowlist import Allowlist, NetworkMode, Policy
from agentbake.egress.cache import Cache, CacheInfo, PruneReport
from agentbake.egress.config import EgressConfig
from agentbake.egress.ledger import Failure, Refusal
from agentbake.egress.proxy import ProxyStats
from agentbake.egress.service import EgressService, ProxyHandle, sandbox_env

__all__ = [
    "Allowlist",
    "Cache",
    "CacheInfo",
    "EgressConfig",
    "EgressService",
    "Failure",
    "NetworkMode",
    "Policy",
    "ProxyHandle",
    "ProxyStats",
    "PruneReport",
    "Refusal",
    "sandbox_env",
]
