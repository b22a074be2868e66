"""The agent's sequences as TRL's rollout functions return them: per-turn prompt ids, completion ids, logprobs.

A GRPO `rollout_func` returns a dict of parallel lists (`prompt_ids`, `completion_ids`, `logprobs`, plus any
extra column); this is that dict for one rollout, one entry per call on each agent sequence. An entry's
prompt ids are the call's own prompt ids, so they include every earlier turn of the sequence.
"""

from __future__ import annotations


def to_trl(document: dict) -> dict:
    """Columns for TRL from an export document; only agent sequences, with `sequence`/`turn` columns naming
    where each entry comes from, and the rollout's `trainable` gate."""
    columns: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "sequence": [], "turn": []}
    for number, sequence in enumerate(document["sequences"]):
        if sequence["role"] != "agent":
            continue
        ids, logprobs = sequence["input_ids"], sequence["logprobs"]
        start = sequence["prompt_len"]
        for turn, length in zip(sequence["turns"], sequence["turn_lengths"], strict=True):
            end = start + length
            mask = sequence["loss_mask"]
            first = next((i for i in range(start, end) if mask[i]), end)  # where this call's sampled ids begin
            columns["prompt_ids"].append(ids[:first])
            columns["completion_ids"].append(ids[first:end])
            columns["logprobs"].append(logprobs[first:end])
            columns["sequence"].append(number)
            columns["turn"].append(turn)
            start = end
    return {
        **columns,
        "rollout_id": document["rollout_id"],
        "trainable": document["validation"]["trainable"],
    }
