"""The choices and defaults `agentbake run` and `rollout` share with `RunnerConfig`, as plain data.

Their `--help` lists them without importing pydantic.
"""

from __future__ import annotations

from typing import Literal, get_args

from agentbake.gateway.settings import LogprobsMode

GatewayPlace = Literal["host", "sandbox"]
GATEWAY_PLACES: tuple[str, ...] = get_args(GatewayPlace)
DEFAULT_GATEWAY: GatewayPlace = "host"

PhaseNetwork = Literal["none", "allowlist", "public"]
"""A batch's override of a phase's network policy (`--agent-network`, `--verifier-network`); None keeps the task's."""
AGENT_NETWORKS: tuple[str, ...] = get_args(PhaseNetwork)
VerifierNetwork = Literal["none", "allowlist", "public", "bridge"]
"""`bridge` (the verifier only): the unfiltered path, a Docker bridge network once the agent is dead."""
VERIFIER_NETWORKS: tuple[str, ...] = get_args(VerifierNetwork)

VerifierMode = Literal["shared", "separate"]
VERIFIER_MODES: tuple[str, ...] = get_args(VerifierMode)

DEFAULT_EXPECT_LOGPROBS: LogprobsMode = "raw"
"""The logprobs a trainer computes its ratios with, unless told otherwise (`RunnerConfig.expect_logprobs`)."""
