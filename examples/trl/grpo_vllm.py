"""GRPO on an installed agent (Claude Code by default) with TRL and a real vLLM server. Not run in CI (needs a GPU).

The model server is vLLM's OpenAI-compatible server as TRL documents it for server mode (processed logprobs,
the weight-transfer engine), so the same process serves the agents (through agentbake's gateway) and
receives the trainer's weights after every step; with the tool-call parser of the model's family, without
which vLLM refuses every request that offers tools (every Claude Code call): `hermes` for Qwen2.5/Qwen3,
`llama3_json` for Llama 3.x, `mistral` for Mistral (vLLM's tool-calling docs list the others):

    VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen3-1.7B --port 8000 --max-model-len 32768 \
        --weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1 \
        --enable-auto-tool-choice --tool-call-parser hermes
    python examples/trl/grpo_vllm.py --image claude-code --tasks examples/tasks \\
        --model Qwen/Qwen3-1.7B --vllm-url http://127.0.0.1:8000

Every rollout runs the agent CLI in its own hardened sandbox; the gateway sets the trainer's sampling on
each call, records the ids vLLM sampled and their processed logprobs, sends each later turn as those ids plus
the new messages (token-in: no re-tokenization drift), and the verifier's reward goes back to TRL (None for a
rollout the infrastructure broke). See agentbake/trl/README.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from agentbake.runner import Runner, RunnerConfig
from agentbake.runner.images import resolve_image
from agentbake.trl import RolloutFunction, task_dataset, trainer_model_settings, verifier_reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="claude-code", help="catalog name or image tag of the agent")
    parser.add_argument("--tasks", type=Path, nargs="+", required=True, help="task dirs or folders of them")
    parser.add_argument("--model", required=True, help="the model vLLM serves (and the trainer loads)")
    parser.add_argument("--vllm-url", default="http://127.0.0.1:8000", help="the vLLM server, without /v1")
    parser.add_argument("--api-key-env", default="AGENTBAKE_UPSTREAM_API_KEY", help="variable with vLLM's key")
    parser.add_argument("--num-generations", type=int, default=8, help="rollouts per task per step")
    parser.add_argument("--concurrency", type=int, default=8, help="sandboxes at once")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("out/grpo"))
    parser.add_argument(
        "--token-in",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue each turn from the exact ids sampled, not a re-tokenized chat (needs the model's tokenizer)",
    )
    options = parser.parse_args()

    args = GRPOConfig(
        output_dir=str(options.out / "trainer"),
        per_device_train_batch_size=options.num_generations,
        num_generations=options.num_generations,
        max_steps=options.max_steps,
        learning_rate=1e-6,
        temperature=0.7,
        bf16=True,
        use_vllm=True,  # weights go to the server after every step; TRL's importance-sampling correction
        vllm_mode="server",  # compares its own logprobs with the processed ones the gateway recorded
        vllm_server_base_url=options.vllm_url,
        logging_steps=1,
        report_to="none",
    )
    config = RunnerConfig(
        image=resolve_image(options.image),
        model=options.vllm_url.rstrip("/") + "/v1",
        model_name=options.model,
        api_key_env=options.api_key_env,
        out_dir=options.out / "rollouts",
        expect_logprobs="processed",  # what the server sends (--logprobs-mode) and TRL computes
        # Qwen3's chat template refuses Claude Code's system messages after the first user turn. Token-in
        # renders only each turn's new messages with the served model's tokenizer (on when its template allows).
        model_settings=trainer_model_settings(
            args,
            inner_system_as_user=True,
            tokenizer=tokenizer_folder(options.model) if options.token_in else None,
            token_in=None if options.token_in else False,
        ),
    )
    with Runner(config) as runner:  # its preflight checks the server sends processed logprobs
        trainer = GRPOTrainer(
            model=options.model,
            args=args,
            reward_funcs=[verifier_reward],
            train_dataset=Dataset.from_list(task_dataset(options.tasks)),
            rollout_func=RolloutFunction(runner, options.tasks, concurrency=options.concurrency, args=args),
        )
        trainer.train()


def tokenizer_folder(model: str) -> Path:
    """The served model's tokenizer files: its own folder, or those files of its Hub snapshot."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken"]))


if __name__ == "__main__":
    main()
