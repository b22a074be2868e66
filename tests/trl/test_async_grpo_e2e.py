"""TRL's own AsyncGRPOTrainer on CPU, one optimisation step, fed by TRL's real `HarnessRolloutWorker`: its
`start()` pickles `RunnerSessions` and spawns the worker process, where the factory starts its own Runner;
each session is a real Pi rollout (the agent) against one of two scripted-model workers (one tokenizer, no Hub).

Checked: the worker's process starts (pickling included), the two sessions of the group land one per worker
and stay there (records and the workers' own logs), each later turn goes by token-in, the step trains exactly the
ids the workers sampled, and `stop()` closes the rollouts (no sandbox left)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer
from trl.chat_template_utils import qwen3_template

from agentbake.buildkit.build import BuildResult
from agentbake.gateway import read_trace
from agentbake.runner import RunnerConfig
from agentbake.runner.docker import labels
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread
from agentbake.trl import RunnerSessions, task_dataset, trainer_model_settings
from tests.runner.rollouts import write_task
from tests.tiny_tokenizer import build_tokenizer
from tests.trl.tiny import INSTRUCTION, SOLVE, TEST_SH, tiny_model

pytestmark = pytest.mark.docker

AGENT = "pi"  # a short system prompt: the CPU step attends over ~2k tokens, not Claude Code's ~16k

async_grpo = pytest.importorskip("trl.experimental.async_grpo")
harness = pytest.importorskip("trl.experimental.async_grpo.openenv_harness")  # needs openenv


class NoWeightSync:
    """The scripted workers have no weights to receive: the trainer's weight sync goes nowhere (TRL's
    `WeightTransferProtocol`, as its own tests inject one)."""

    def init_weight_transfer(self) -> None: ...
    def pause(self) -> None: ...
    def send_weights(self, iterator: Iterator[tuple[str, torch.Tensor]]) -> None:
        for _ in iterator:
            pass

    def resume(self) -> None: ...
    def destroy(self) -> None: ...


class CpuVarlenAttention:
    """TRL's packed training forward calls flash-attention 3's `flash_attn_varlen_func` (a GPU kernel fetched
    from the Hub); this is that call on CPU with torch's SDPA: each segment's queries attend causally to its
    keys, aligned to their end (flash-attention's causal rule when a segment extends a shared prefix)."""

    @staticmethod
    def flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, causal=True, **_):
        out = torch.empty_like(q)
        group = q.shape[1] // k.shape[1]
        for i in range(len(cu_q) - 1):
            qs, qe, ks, ke = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
            query = q[qs:qe].transpose(0, 1).unsqueeze(0).contiguous()
            key = k[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0).contiguous()
            value = v[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0).contiguous()
            if qe - qs == ke - ks:
                mask, is_causal = None, True
            else:
                mask, is_causal = torch.ones(qe - qs, ke - ks, dtype=torch.bool).tril(ke - ks - (qe - qs)), False
            attended = torch.nn.functional.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, is_causal=is_causal, scale=softmax_scale
            )
            out[qs:qe] = attended[0].transpose(0, 1)
        return out


class RecordingTrainer(async_grpo.AsyncGRPOTrainer):
    """AsyncGRPOTrainer keeping what each `compute_loss` got and the loss it returned."""

    seen: list[tuple[dict[str, Any], float]]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.seen.append(({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)}, loss.item()))
        return loss


def test_trls_async_worker_trains_a_step_on_agentbake_sessions_over_two_workers(
    built_images: dict[str, BuildResult],
    engine: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # vLLM is TRL's sampler when it drives the turns; here the agent does, through agentbake's gateway, so the
    # worker needs no vLLM: only its import gate asks for one.
    monkeypatch.setattr("trl.experimental.async_grpo.async_rollout_worker.is_vllm_available", lambda: True)
    # TRL 1.16 asks CUDA for the device's name to report MFU, which fails on CPU; None is its own "unknown".
    monkeypatch.setattr("trl.experimental.async_grpo.async_grpo_trainer.get_peak_flops_per_device", lambda *a: None)
    monkeypatch.setattr("trl.experimental.async_grpo.packing._flash_attn", lambda: CpuVarlenAttention)
    task_dir = write_task(tmp_path / "tasks", "nanoseconds", solve=SOLVE, test=TEST_SH)
    (task_dir / "instruction.md").write_text(INSTRUCTION)
    tokenizer_dir = build_tokenizer(tmp_path / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    tokenizer.response_template = qwen3_template  # its template is Qwen's, shortened: TRL parses replies so
    model_dir = tmp_path / "model"
    tiny_model(tokenizer_dir).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    args = async_grpo.AsyncGRPOConfig(
        output_dir=str(tmp_path / "trainer"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        learning_rate=1e-2,
        temperature=0.7,
        top_k=-1,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        max_inflight_tasks=2,
        gradient_checkpointing=False,  # one forward over the agent's ~16k-token prompt, not two
        token_budget=0,  # a fixed count of samples per step (a budget batches until it is full)
        weight_sync_steps=1,
    )
    models = [ScriptedModel(tasks=[task_dir], tokenizer=tokenizer_dir, keep_log=True) for _ in range(2)]
    for model in models:
        model.logprobs_mode = "processed"  # as vLLM --logprobs-mode processed_logprobs, which TRL computes
    servers = [serve_in_thread(model, log_level="critical") for model in models]
    try:
        urls = [f"{server.url}/v1" for server in servers]
        config = RunnerConfig(
            image=built_images[AGENT].tag,
            model=urls,
            model_name="scripted",
            out_dir=tmp_path / "out",
            expect_logprobs="processed",
            model_settings=trainer_model_settings(args, tokenizer=tokenizer_dir, token_in=True),  # exact ids
        )
        worker = harness.HarnessRolloutWorker(
            model_name=str(model_dir),
            dataset=Dataset.from_list(task_dataset([task_dir])),
            reward_funcs=[],
            processing_class=tokenizer,
            eos_token_ids=[tokenizer.eos_token_id],
            num_generations=args.num_generations,
            max_inflight_tasks=args.max_inflight_tasks,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            min_p=args.min_p,
            repetition_penalty=args.repetition_penalty,
            harness_session_factory=RunnerSessions(config, [task_dir]),
            queue_maxsize=2,  # the step's two samples: generation waits rather than running ahead of the step
        )
        trainer = RecordingTrainer(
            model=str(model_dir),
            args=args,
            train_dataset=Dataset.from_list(task_dataset([task_dir])),
            processing_class=tokenizer,
            rollout_worker=worker,
            weight_transfer=NoWeightSync(),
        )
        trainer.seen = []
        before = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.train()  # starts the worker (pickle, spawn), trains one step, stops the worker
    finally:
        for server in servers:
            server.stop()

    ((inputs, loss),) = trainer.seen
    assert torch.isfinite(torch.tensor(loss))
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("*/result.json"))]
    done = [r for r in results if r["status"] == "ok"]
    closed = [r for r in results if r["status"] != "ok"]
    assert len(done) >= 2, results
    # The sessions still running when the trainer stopped were closed: ended, saying why, no sandbox left.
    assert all(r["status"] == "sandbox_error" and "closed by its session" in r["error"] for r in closed), closed
    left = engine.containers.list(all=True, filters={"label": labels.ROLLOUT})
    assert not {c.labels.get(labels.ROLLOUT) for c in left} & {r["rollout_id"] for r in results}

    # Each session on one worker for all its calls, the group's two sessions on the two workers.
    assert {r["worker"] for r in results} == set(urls)
    recorded: dict[str, list[tuple[int, ...]]] = {url: [] for url in urls}
    for result in results:
        records = read_trace(tmp_path / "out" / result["rollout_id"] / "trace.jsonl")
        assert {r.worker for r in records} <= {result["worker"]}
        calls = [r for r in records if r.request.get("tools")]
        if result["status"] == "ok":  # each later turn continued the previous one's exact ids
            assert [c.token_in["route"] for c in calls] == ["chat"] + ["completions"] * (len(calls) - 1)
        recorded[result["worker"]] += [tuple(r.completion_token_ids) for r in records if r.ok]
    for url, model in zip(urls, models, strict=True):
        served = [tuple(ids) for request, ids in zip(model.requests, model.emitted, strict=True) if _agent(request)]
        assert Counter(recorded[url]) <= Counter(served) and recorded[url]  # its log holds every call pinned to it

    # The step trained exactly the ids the workers sampled, nothing the environment wrote: one loss term per
    # sampled id of the step's two sessions (each sampled the same number: the scripted replay is deterministic).
    (sampled_per_session,) = {r["tokens"] for r in done}
    assert int((inputs["token_index"] >= 0).sum()) == args.per_device_train_batch_size * sampled_per_session
    trained = inputs["shift_labels"][inputs["shift_labels"] != -100].tolist()
    assert set(trained) <= {i for calls in recorded.values() for ids in calls for i in ids}


def _agent(request: dict) -> bool:
    """A call of the task's conversation: one continued by token-in (a prompt of ids), or a chat call holding the
    task's instruction (the preflight's calls carry none)."""
    return "prompt" in request or INSTRUCTION.strip()[:40] in json.dumps(request.get("messages"))
