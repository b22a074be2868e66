"""TRL's real GRPOTrainer on CPU, one optimisation step, its rollouts produced by agentbake: the real Claude
Code in its sandbox, the gateway, and the scripted model answering in the ids of a tokenizer built here (no
Hub), for a tiny model with random weights built from a config.

The model samples non-canonical tokenizations, which re-tokenizing the chat would not reproduce; the gateway
continues each turn by token-in, so every row is one sequence. Checked at the trainer's own `compute_loss`:
every row's prompt and completion are the ids the model was shown and sampled (from the gateway's trace and
the scripted model's own log), its loss mask is 1 exactly on the sampled ids (tool results and template tokens
masked by env_mask), and the rewards are the verifier's.
AsyncGRPO's session factory then runs one more rollout, read by TRL's own chaining code."""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from agentbake.buildkit.build import BuildResult
from agentbake.gateway import read_trace
from agentbake.runner import Runner, RunnerConfig, discover_tasks
from agentbake.runner.result import Status
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread
from agentbake.trl import RolloutFunction, session_factory, task_dataset, trainer_model_settings, verifier_reward
from tests.runner.rollouts import write_task
from tests.tiny_tokenizer import build_tokenizer
from tests.trl.tiny import INSTRUCTION, SOLVE, TEST_SH, tiny_model

pytestmark = pytest.mark.docker


@dataclass
class Setup:
    runner: Runner
    model: ScriptedModel
    task_dir: Path
    tokenizer_dir: Path
    args: GRPOConfig


class RecordingTrainer(GRPOTrainer):
    """GRPOTrainer keeping what each `compute_loss` got (its masks and ids) and the loss it returned."""

    seen: list[tuple[dict[str, torch.Tensor], float]]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        tensors = {k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        self.seen.append((tensors, loss.item()))
        return loss


@pytest.fixture(scope="module")
def setup(built_images: dict[str, BuildResult], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("trl")
    task_dir = write_task(root / "tasks", "nanoseconds", solve=SOLVE, test=TEST_SH, instruction=INSTRUCTION)
    tokenizer_dir = build_tokenizer(root / "tokenizer")
    args = GRPOConfig(
        output_dir=str(root / "trainer"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        learning_rate=1e-2,
        temperature=0.7,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    model = ScriptedModel(tasks=[task_dir], tokenizer=tokenizer_dir, keep_log=True, piecewise=True)
    model.logprobs_mode = "processed"  # as vLLM --logprobs-mode processed_logprobs, which TRL computes
    with serve_in_thread(model, log_level="critical") as served:
        config = RunnerConfig(
            image=built_images["claude-code"].tag,
            model=served.url + "/v1",
            model_name="scripted",
            out_dir=root / "out",
            expect_logprobs="processed",
            # the gateway samples as the trainer computes, and sends the exact ids of each turn on
            model_settings=trainer_model_settings(args, tokenizer=tokenizer_dir, token_in=True),
        )
        with Runner(config) as runner:
            yield Setup(runner, model, task_dir, tokenizer_dir, args)


def agent_calls(out_dir: Path) -> list[Any]:
    """The rollout's agent calls as the gateway recorded them (calls offering tools: Claude Code's title and
    other side calls offer none)."""
    return [r for r in read_trace(out_dir / "trace.jsonl") if r.request.get("tools")]


def test_one_grpo_step_trains_exactly_the_sampled_tokens_with_the_verifiers_rewards(setup: Setup) -> None:
    rollouts = RolloutFunction(setup.runner, [setup.task_dir], concurrency=2, args=setup.args)
    rewards_given: list[list[float | None]] = []

    def reward(completions, agentbake_reward, **kwargs):
        rewards_given.append(list(agentbake_reward))
        return verifier_reward(completions, agentbake_reward, **kwargs)

    model = tiny_model(setup.tokenizer_dir)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=[reward],
        args=setup.args,
        train_dataset=Dataset.from_list(task_dataset([setup.task_dir])),
        processing_class=AutoTokenizer.from_pretrained(str(setup.tokenizer_dir), local_files_only=True),
        rollout_func=rollouts,
    )
    trainer.seen = []
    trainer.train()

    results = rollouts.results
    assert [r.status for r in results] == [Status.OK, Status.OK], [r.error for r in results]
    # The rewards the trainer got are the verifier's, as each rollout's result.json holds them.
    verifier = [json.loads((r.out_dir / "result.json").read_text())["reward"] for r in results]
    assert rewards_given == [verifier] and all(0 <= v < 1 for v in verifier)

    # What each row of the batch should be: the rollout's first agent prompt, then everything the last agent
    # call saw and sampled; trained exactly where the model sampled.
    expected = []
    for result in results:
        calls = agent_calls(result.out_dir)
        assert len(calls) >= 2 and all(c.request.get("temperature") == 0.7 for c in calls)  # trainer's sampling
        document = json.loads((result.out_dir / "sequences.json").read_text())
        assert [s["role"] for s in document["sequences"]].count("agent") == 1  # every turn chained
        assert [c.token_in["route"] for c in calls] == ["chat"] + ["completions"] * (len(calls) - 1)
        whole = calls[-1].prompt_token_ids + calls[-1].completion_token_ids
        sampled = [i for c in calls for i in c.completion_token_ids]
        expected.append((tuple(calls[0].prompt_token_ids), tuple(whole), tuple(sampled)))
    # The sampled ids are the scripted model's own, as it logged them (not only as the gateway captured them).
    by_model = [
        tuple(ids)
        for request, ids in zip(setup.model.requests, setup.model.emitted, strict=True)
        if "prompt" in request  # a turn continued by token-in
        or (request.get("tools") and any(INSTRUCTION.strip() in json.dumps(m) for m in request["messages"]))
    ]
    assert Counter(by_model) == Counter(tuple(c.completion_token_ids) for r in results for c in agent_calls(r.out_dir))

    ((inputs, loss),) = trainer.seen
    trained_rows = []
    for row in range(inputs["prompt_ids"].shape[0]):
        prompt = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
        kept = inputs["completion_mask"][row].bool()
        completion = inputs["completion_ids"][row][kept].tolist()
        loss_mask = (inputs["completion_mask"][row] * inputs["tool_mask"][row])[kept].tolist()
        trained = tuple(i for i, m in zip(completion, loss_mask, strict=True) if m)
        trained_rows.append((tuple(prompt), tuple(prompt + completion), trained))
    assert sorted(trained_rows) == sorted(expected)
    vocabulary = len(AutoTokenizer.from_pretrained(str(setup.tokenizer_dir), local_files_only=True))
    assert all(0 <= i < vocabulary for _, whole, _ in expected for i in whole)

    assert math.isfinite(loss)
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    for entry in logged:
        print(f"trl e2e: step {entry.get('step')} loss {entry['loss']} reward {entry.get('reward')}", flush=True)
    print(
        f"trl e2e: verifier rewards {verifier}, prompt lengths {[len(e[0]) for e in expected]}, "
        f"sequence lengths {[len(e[1]) for e in expected]}, sampled tokens {[len(e[2]) for e in expected]}"
    )
    assert logged and logged[0]["reward"] == pytest.approx(sum(verifier) / len(verifier))
    if verifier[0] != verifier[1]:  # different rewards: non-zero advantages, so the step moved the weights
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def mask_after(turn: Any) -> list[int]:
    """A turn's loss mask over its completion, as TRL's harness worker takes it from the prompt + completion one."""
    return turn.loss_mask[len(turn.prompt_token_ids) :]


def test_the_async_session_factory_hands_trl_the_sampled_tokens_and_the_reward(setup: Setup) -> None:
    from trl.experimental.async_grpo.async_rollout_worker import TurnRecord, _chain_to_sequences

    sampling = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
    factory = session_factory(setup.runner, discover_tasks([setup.task_dir]))(sampling=sampling)
    session = factory.create(INSTRUCTION, seed=0, episode_id=uuid.uuid4().hex)
    assert session.wait_for_completion(timeout_s=600) == 0
    captured = session.fetch_training_trace()
    verified = session.verify([])
    session.close()
    result = session.result
    assert result is not None and result.status is Status.OK
    assert verified.env_reward == result.reward
    # TRL's harness worker reads the trace this way, then reconciles the turns into training rows.
    turns = [
        TurnRecord(
            t.prompt_token_ids, t.completion_token_ids, t.per_token_logps, t.loss_mask[len(t.prompt_token_ids) :]
        )
        for t in captured.turns
    ]
    (sequence,), _ = _chain_to_sequences(turns, session.rollout_id, 0)
    trained = [i for i, m in zip(sequence.input_ids, sequence.completion_mask, strict=True) if m]
    assert trained == [i for c in agent_calls(result.out_dir) for i in c.completion_token_ids]
    entries = session.fetch_proxy_trace()  # OpenEnv's TraceEntry shape: what TRL's worker counts tool calls from
    assert [e["request"]["messages"] for e in entries] == [c.request["messages"] for c in agent_calls(result.out_dir)]
