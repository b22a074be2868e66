"""A rollout as one row of TRL's GRPO `rollout_func` contract: prompt ids, completion ids, logprobs, env_mask.

A multi-turn conversation is one completion, as TRL's tool loop builds it. `env_mask` is 1 on sampled tokens and 0
on tokens the environment wrote. A rollout with several agent sequences (a subagent, a compaction) gives the row to
the one holding the last agent call; the others count as `untrained_tokens`. AsyncGRPO (`agentbake.trl.sessions`)
trains every sequence instead.
"""

from __future__ import annotations

from typing import Any


def to_trl(document: dict) -> dict[str, Any]:
    """One rollout's TRL row from an export document: `prompt_ids`, `completion_ids`, `logprobs` (0.0 where not
    sampled), `env_mask`, plus `rollout_id`, `trainable`, `agent_sequences`, `untrained_tokens`, `worker` (the
    last call's model worker) and `policy_versions` (each call's, None where unset)."""
    agent = [s for s in document["sequences"] if s["role"] == "agent"]
    row: dict[str, Any] = {
        "rollout_id": document["rollout_id"],
        "trainable": document["validation"]["trainable"],
        "agent_sequences": len(agent),
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        "untrained_tokens": 0,
        "worker": None,
        "policy_versions": [],
    }
    if not agent:
        return row
    main = max(agent, key=lambda s: s["calls"][-1])  # the path whose leaf is the last agent call
    start = main["prompt_len"]
    mask = main["loss_mask"][start:]
    row["prompt_ids"] = main["input_ids"][:start]
    row["completion_ids"] = main["input_ids"][start:]
    row["env_mask"] = mask
    row["logprobs"] = [lp if sampled else 0.0 for lp, sampled in zip(main["logprobs"][start:], mask, strict=True)]
    others = {call for s in agent if s is not main for call in s["calls"]} - set(main["calls"])
    calls = {call["index"]: call for call in document["calls"]}
    row["untrained_tokens"] = sum(calls[call]["completion_len"] for call in others)
    row["worker"] = calls[main["calls"][-1]].get("worker")
    row["policy_versions"] = [calls[call].get("policy_version") for call in main["calls"]]
    return row
