"""A rollout as one row of TRL's GRPO `rollout_func` contract: prompt ids, completion ids, logprobs, env_mask.

TRL's `RolloutFunc = Callable[[list[str], GRPOTrainer], dict]` returns parallel lists with one entry per
completion (one rollout per prompt it was given): `prompt_ids`, `completion_ids`, `logprobs`, and the optional
`env_mask` (1 on tokens the model sampled, 0 on tokens the environment wrote: tool results, template tokens
between turns), which the trainer multiplies into its loss mask. A whole multi-turn agent conversation is one
completion, as TRL's own tool loop builds it: the first call's prompt, then everything after it.

The multi-sequence rule: a rollout can hold several agent sequences (a subagent's own conversation, the
continuation after a compaction). They cannot share one row: each was sampled from its own context, so
concatenated the later one would be trained on a context it never saw. The row is the agent sequence that
holds the rollout's last agent call (the conversation that finished the task, whose work the verifier
judged); the sampled tokens of every other agent sequence are counted in `untrained_tokens`, not trained on.
AsyncGRPO (`agentbake.trl.sessions`) trains every agent sequence instead.
"""

from __future__ import annotations

from typing import Any


def to_trl(document: dict) -> dict[str, Any]:
    """One rollout's row (see the module docstring) from an export document, as `agentbake trace export
    --format trl` writes it (one JSON line per rollout; the columns a `rollout_func` returns for several
    rollouts are their rows' fields, listed in order): `prompt_ids`, `completion_ids`,
    `logprobs` (0.0 where the model did not sample, as TRL's tool loop fills them), `env_mask`, and
    `rollout_id`, `trainable`, `agent_sequences`, `untrained_tokens`, `worker` (the model worker of the row's
    last call) and `policy_versions` (each of the row's calls' policy version, in order; None where unset). A
    rollout without an agent sequence gets empty id lists (and is never trainable)."""
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
