"""TRL's `GRPOTrainer(rollout_func=...)`: each prompt's task run by agentbake, returned in TRL's contract.

TRL calls `rollout_func(prompts, trainer)` and wants one completion per prompt: `prompt_ids`, `completion_ids`,
`logprobs` and `env_mask`, other keys going to the reward functions. Each prompt is a task's instruction
(`task_dataset`), run through the `Runner`; its row is the export's (`to_trl`).

The reward goes out as the `agentbake_reward` column, read by `verifier_reward`. An infrastructure failure or an
untrainable rollout gets None, never 0.0, so TRL leaves it out of its group's baseline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentbake.errors import ConfigError
from agentbake.export import to_trl
from agentbake.gateway.model_settings import ModelSettings
from agentbake.gateway.settings import SAMPLING_FIELDS
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.rollout import SEQUENCES_FILE
from agentbake.runner.runner import Runner
from agentbake.tasks import Task, load_tasks

INFRASTRUCTURE_FAILURES = frozenset(
    {Status.SANDBOX_ERROR, Status.SETUP_ERROR, Status.VERIFIER_ERROR, Status.VERIFIER_TIMEOUT, Status.MODEL_ERROR}
)
"""Statuses that say nothing about the agent: its rollout gets no reward. An agent that failed, timed out or
ran out of memory keeps the verifier's reward (the verifier still ran)."""

REWARD_COLUMN = "agentbake_reward"


def task_dataset(tasks: Iterable[Task | str | Path]) -> list[dict[str, str]]:
    """One row per task for the trainer's dataset: `prompt` (its instruction) and `task` (its name).

    Use it as `datasets.Dataset.from_list(task_dataset(...))`."""
    return [{"prompt": task.instruction, "task": task.name} for task in load_tasks(tasks)]


def trainer_model_settings(args: Any, **settings: Any) -> ModelSettings:
    """The gateway settings that make the agent sample as the trainer computes.

    They are the `GRPOConfig`'s temperature, top_p, top_k, min_p and repetition_penalty, plus any other
    `ModelSettings` field in `settings`: template switches, and `tokenizer=DIR` for token-in (exact prompt ids)."""
    if taken := sorted(set(settings) & set(SAMPLING_FIELDS)):
        raise ConfigError(f"trainer_model_settings: {', '.join(taken)} come from the trainer's args; drop them here")
    return ModelSettings(**settings, **{name: getattr(args, name) for name in SAMPLING_FIELDS})


def check_alignment(runner: Runner, args: Any) -> None:
    """Refuse a runner whose rollouts would not be sampled and stamped as TRL trains on them (ConfigError)."""
    check_logprobs(runner)
    check_sampling(runner, {name: getattr(args, name) for name in SAMPLING_FIELDS}, "trainer")


def check_logprobs(runner: Runner) -> None:
    """Check that the server sends processed logprobs and the export expects them, as TRL computes.

    TRL divides logits by its temperature. The preflight finds the server's mode (`runner.logprobs_mode`)."""
    if runner.config.expect_logprobs != "processed":
        raise ConfigError(
            "RunnerConfig.expect_logprobs is 'raw', but TRL computes logprobs after temperature (processed): "
            f"use {_FIX}"
        )
    if runner.logprobs_mode != "processed":
        found = runner.logprobs_mode or "unknown (no preflight, no logprobs_mode)"
        raise ConfigError(
            f"the model server's logprobs are {found}; TRL needs processed ones: serve vLLM with "
            "--logprobs-mode processed_logprobs and keep the runner's preflight on (RunnerConfig.preflight)"
        )


def check_sampling(runner: Runner, wanted: dict[str, Any], who: str) -> None:
    """Check that the gateway sets `wanted` sampling on every call, else the agent samples another policy.

    Disabled spellings are equal: top_k 0 or -1, min_p 0.0 or None."""
    settings = runner.config.model_settings
    wrong = [
        f"{name} {getattr(settings, name)!r} ({who}: {value!r})"
        for name, value in wanted.items()
        if name in SAMPLING_FIELDS
        and _disabled_as_none(name, getattr(settings, name)) != _disabled_as_none(name, value)
    ]
    if wrong:
        raise ConfigError(
            "the gateway would let the agent sample otherwise than the "
            f"{who} computes: RunnerConfig.model_settings {', '.join(wrong)}; use {_FIX}"
        )


_FIX = "RunnerConfig(model_settings=trainer_model_settings(args, ...), expect_logprobs='processed')"


def _disabled_as_none(name: str, value: Any) -> Any:
    if name == "top_k" and isinstance(value, int) and value <= 0:
        return None
    if name == "min_p" and value == 0:
        return None
    return value


class RolloutFunction:
    """`GRPOTrainer(rollout_func=RolloutFunction(runner, tasks))`: see the module docstring.

    `runner` is a started `Runner`, `tasks` the tasks the prompts name, `concurrency` how many rollouts run at once.
    `args`, the trainer's `GRPOConfig`, checks the runner at once rather than at the first call."""

    def __init__(
        self, runner: Runner, tasks: Iterable[Task | str | Path], *, concurrency: int = 4, args: Any = None
    ) -> None:
        self.runner = runner
        self.concurrency = concurrency
        self.tasks: dict[str, Task] = {}
        for task in load_tasks(tasks):
            key = _instruction_key(task.instruction)
            if key in self.tasks:
                raise ConfigError(
                    f"tasks {self.tasks[key].path} and {task.path} have the same instruction: a prompt could not "
                    "tell which one to run"
                )
            self.tasks[key] = task
        if args is not None:
            check_alignment(runner, args)
        self.results: list[RolloutResult] = []
        """The last call's rollouts, in the order of its prompts."""

    def task_for(self, prompt: Any) -> Task:
        """The task a prompt names: its text (or its last user message's) is the task's instruction."""
        text = prompt
        if isinstance(prompt, list):
            users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
            text = users[-1].get("content") if users else None
        task = self.tasks.get(_instruction_key(text)) if isinstance(text, str) else None
        if task is None:
            shown = json.dumps(prompt)[:120]
            raise ConfigError(
                f"prompt {shown} is no task's instruction; the dataset's prompts must be the instructions of "
                f"the tasks given to RolloutFunction ({len(self.tasks)} tasks; build it with task_dataset)"
            )
        return task

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        check_alignment(self.runner, trainer.args)
        tasks = [self.task_for(prompt) for prompt in prompts]
        self.results = self.runner.run_batch(tasks, concurrency=self.concurrency)
        placeholder = _placeholder(trainer.processing_class)
        rows = [rollout_row(result, placeholder) for result in self.results]
        return {key: [row[key] for row in rows] for key in rows[0]} if rows else {}


def unscored_reason(result: RolloutResult) -> str | None:
    """Why a rollout says nothing about the policy (an infrastructure failure, uncaptured calls); None when scored.

    Such a rollout's reward is None and none of its tokens is trained."""
    if result.status in INFRASTRUCTURE_FAILURES:
        return f"{result.status.value}: {result.error or 'no detail'}"
    if result.trainable is None:
        return "no model call was recorded"
    if not result.trainable:
        return f"its calls could not be captured for training (see {SEQUENCES_FILE}'s validation)"
    return None


def rollout_row(result: RolloutResult, placeholder: tuple[int, int]) -> dict[str, Any]:
    """A finished rollout as TRL's row plus the columns the reward functions get.

    They are `agentbake_reward` (None: unscored), `agentbake_unscored`, `agentbake_status`, `agentbake_rollout_id`,
    `agentbake_worker`, `agentbake_policy_versions` and `agentbake_untrained_tokens`. A rollout with nothing to train on
    gets a one-token `placeholder` row whose env_mask is 0."""
    document_file = result.out_dir / SEQUENCES_FILE if result.out_dir is not None else None
    row = to_trl(json.loads(document_file.read_text())) if document_file and document_file.exists() else None
    reason = unscored_reason(result)
    if reason is None and (row is None or not row["trainable"]):
        reason = f"its calls could not be captured for training (see {SEQUENCES_FILE}'s validation)"
    if reason is None and not row["completion_ids"]:
        reason = "no agent sequence to train on"
    versions = row["policy_versions"] if row is not None else []
    if row is None or reason is not None:
        pad, eos = placeholder
        row = {"prompt_ids": [pad], "completion_ids": [eos], "logprobs": [0.0], "env_mask": [0], "untrained_tokens": 0}
    return {
        "prompt_ids": row["prompt_ids"],
        "completion_ids": row["completion_ids"],
        "logprobs": row["logprobs"],
        "env_mask": row["env_mask"],
        REWARD_COLUMN: result.reward if reason is None else None,
        "agentbake_unscored": reason,
        "agentbake_status": result.status.value,
        "agentbake_rollout_id": result.rollout_id,
        "agentbake_worker": result.worker,
        "agentbake_policy_versions": versions,
        "agentbake_untrained_tokens": row["untrained_tokens"],
    }


def verifier_reward(
    completions: Sequence[Any], agentbake_reward: Sequence[float | None], **_: Any
) -> list[float | None]:
    """TRL reward function: each rollout's verifier reward (`reward_funcs=[verifier_reward]`); None where the
    rollout is unscorable, which TRL keeps out of the group's baseline."""
    return list(agentbake_reward)


def _instruction_key(text: Any) -> str | None:
    return " ".join(text.split()) if isinstance(text, str) else None


def _placeholder(processing_class: Any) -> tuple[int, int]:
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    eos = tokenizer.eos_token_id
    return (eos if tokenizer.pad_token_id is None else tokenizer.pad_token_id), eos
