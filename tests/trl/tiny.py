"""What the TRL end-to-end tests share: a task whose verifier rewards differ between rollouts, and a tiny
Qwen2 model with random weights built from a config (no Hub)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

INSTRUCTION = "Write the nanoseconds of the current time into answer.txt in the working directory.\n"
# The scripted replies are the same in every rollout; printing the digits makes the contexts differ too, or the
# two replies' gradients (equal tokens, opposite advantages) would cancel to exactly zero.
SOLVE = "date +%N | tee answer.txt\n"
# The reward is the verifier's reading of what the agent wrote: 0.<first six digits>, so two rollouts of
# the same task get different rewards (GRPO's advantages are then not all zero).
TEST_SH = """\
digits=$(tr -dc 0-9 < answer.txt 2>/dev/null | cut -c1-6)
if [ -z "$digits" ]; then echo 0 > /logs/verifier/reward.txt; else echo "0.$digits" > /logs/verifier/reward.txt; fi
"""


def tiny_model(tokenizer_dir: Path) -> Qwen2ForCausalLM:
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,  # the agent's ~14k-token prompt is attended over: small sizes keep the step ~20 s
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=65536,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)
