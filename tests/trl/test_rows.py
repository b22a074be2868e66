"""agentbake.trl without a sandbox: rows and rewards from finished rollouts, the prompt -> task mapping, the
AsyncGRPO training trace read by TRL's own chaining, and what a misaligned runner is told."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
from trl.experimental.async_grpo.async_rollout_worker import TurnRecord, _chain_to_sequences

from agentbake.errors import ConfigError
from agentbake.export import export_rollout, write_sequences
from agentbake.gateway.model_settings import ModelSettings
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner_config import RunnerConfig
from agentbake.trl import (
    RolloutFunction,
    RunnerSessions,
    check_worker_sampling,
    rollout_row,
    session_factory,
    task_dataset,
    trainer_model_settings,
    verifier_reward,
)
from agentbake.trl.rollout import check_alignment
from agentbake.trl.sessions import training_trace
from tests.export.traces import record, write
from tests.runner.rollouts import write_task

PLACEHOLDER = (0, 2)
# call 0 samples [3, 4]; the tool result [5, 6] comes back in call 1's prompt; call 1 samples [7, 8];
# a subagent (its own root) samples [52, 53].
CALLS = [record(0, [1, 2], [3, 4]), record(1, [50, 51], [52, 53]), record(2, [1, 2, 3, 4, 5, 6], [7, 8])]


def finished(tmp_path: Path, status: Status, reward: float = 0.5, records: list[dict] = CALLS) -> RolloutResult:
    out = tmp_path / "r"
    out.mkdir()
    write_sequences(write(out / "trace.jsonl", records), out / "sequences.json", rollout_id="r")
    return RolloutResult("r", "t", status, reward, "image", "claude-code", out_dir=out, trainable=True)


def test_a_rollout_is_one_row_with_the_verifiers_reward(tmp_path):
    row = rollout_row(finished(tmp_path, Status.AGENT_ERROR), PLACEHOLDER)  # an agent's failure keeps its reward
    assert (row["prompt_ids"], row["completion_ids"], row["env_mask"]) == (
        [1, 2],
        [3, 4, 5, 6, 7, 8],
        [1, 1, 0, 0, 1, 1],
    )
    assert row["logprobs"] == [-0.03, -0.04, 0.0, 0.0, -0.07, -0.08]
    assert (row["agentbake_reward"], row["agentbake_status"], row["agentbake_untrained_tokens"]) == (
        0.5,
        "agent_error",
        2,
    )
    assert verifier_reward(["a", "b"], [0.5, None], prompts=["p", "p"]) == [0.5, None]


@pytest.mark.parametrize(
    "status",
    [Status.SANDBOX_ERROR, Status.SETUP_ERROR, Status.VERIFIER_ERROR, Status.VERIFIER_TIMEOUT, Status.MODEL_ERROR],
)
def test_an_infrastructure_failure_has_no_reward_and_trains_nothing(tmp_path, status):
    result = finished(tmp_path, status, reward=0.0)
    result.error = "model worker http://w2:8000/v1 failed"
    row = rollout_row(result, PLACEHOLDER)
    assert row["agentbake_reward"] is None  # not 0.0: TRL keeps it out of the group's baseline
    assert row["agentbake_unscored"] == f"{status.value}: model worker http://w2:8000/v1 failed"  # the reason
    assert (row["prompt_ids"], row["completion_ids"], row["env_mask"]) == ([0], [2], [0])


def test_an_untrainable_capture_has_no_reward(tmp_path):
    untrainable = [record(0, None, [3, 4])]  # no prompt ids captured
    row = rollout_row(finished(tmp_path, Status.OK, reward=1.0, records=untrainable), PLACEHOLDER)
    assert row["agentbake_reward"] is None and row["env_mask"] == [0]
    assert "could not be captured for training" in row["agentbake_unscored"]


def test_a_row_names_its_worker_and_each_calls_policy_version(tmp_path):
    stamped = [
        record(0, [1, 2], [3, 4], worker="http://w1:8000/v1", policy_version=6),
        record(1, [1, 2, 3, 4, 5, 6], [7, 8], worker="http://w1:8000/v1", policy_version=7),
    ]
    result = finished(tmp_path, Status.OK, records=stamped)
    result.worker = "http://w1:8000/v1"
    row = rollout_row(result, PLACEHOLDER)
    assert (row["agentbake_worker"], row["agentbake_policy_versions"], row["agentbake_unscored"]) == (
        "http://w1:8000/v1",
        [6, 7],  # the weights moved between the two calls: the trainer sees which call is how stale
        None,
    )
    turns = training_trace(export_rollout(tmp_path / "r" / "trace.jsonl", "r"), trainable=True).turns
    stamps = [(t.metadata["worker"], t.metadata["policy_version"]) for t in turns]
    assert stamps == [("http://w1:8000/v1", 6), ("http://w1:8000/v1", 7)]


def test_prompts_map_to_tasks_by_instruction(tmp_path):
    one = write_task(tmp_path, "one", solve="true\n", test="exit 0\n", instruction="Do   one\nthing.\n")
    write_task(tmp_path, "two", solve="true\n", test="exit 0\n", instruction="Do two.\n")
    rows = task_dataset([tmp_path])  # one path holding many tasks
    assert sorted(r["task"] for r in rows) == ["one", "two"]
    runner = SimpleNamespace(config=None)
    function = RolloutFunction(runner, [tmp_path])  # type: ignore[arg-type]
    assert function.task_for("Do one thing.").path == one  # whitespace runs count as one space
    assert function.task_for([{"role": "user", "content": "Do two."}]).name == "two"
    with pytest.raises(ConfigError, match=r"prompt \"Do three.\" is no task's instruction"):
        function.task_for("Do three.")
    write_task(tmp_path / "more", "three", solve="true\n", test="exit 0\n", instruction="Do two.\n")
    with pytest.raises(ConfigError, match="have the same instruction"):
        RolloutFunction(runner, [tmp_path, tmp_path / "more"])  # type: ignore[arg-type]


def test_a_misaligned_runner_is_refused_naming_the_fix():
    args = SimpleNamespace(temperature=0.7, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0)
    aligned = SimpleNamespace(expect_logprobs="processed", model_settings=trainer_model_settings(args))
    check_alignment(SimpleNamespace(config=aligned, logprobs_mode="processed"), args)  # type: ignore[arg-type]
    raw = SimpleNamespace(config=aligned.__dict__ | {"expect_logprobs": "raw"}, logprobs_mode="processed")
    raw.config = SimpleNamespace(**raw.config)
    with pytest.raises(ConfigError, match="TRL computes logprobs after temperature"):
        check_alignment(raw, args)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="logprobs are raw; TRL needs processed ones"):
        check_alignment(SimpleNamespace(config=aligned, logprobs_mode="raw"), args)  # type: ignore[arg-type]
    hot = SimpleNamespace(expect_logprobs="processed", model_settings=ModelSettings(temperature=1.0))
    with pytest.raises(ConfigError, match=r"temperature 1.0 \(trainer: 0.7\)"):
        check_alignment(SimpleNamespace(config=hot, logprobs_mode="processed"), args)  # type: ignore[arg-type]


def test_the_async_training_trace_chains_in_trl_to_the_sampled_tokens(tmp_path):
    trace = training_trace(export_rollout(write(tmp_path / "t.jsonl", CALLS), "r"), trainable=True)
    turns = [
        TurnRecord(
            t.prompt_token_ids, t.completion_token_ids, t.per_token_logps, t.loss_mask[len(t.prompt_token_ids) :]
        )
        for t in trace.turns
    ]
    sequences, _ = _chain_to_sequences(turns, "r", 0)  # TRL's own reconciliation (lossless: forks at once)
    trained = sorted([i for i, m in zip(s.input_ids, s.completion_mask, strict=True) if m] for s in sequences)
    assert trained == [[3, 4, 7, 8], [52, 53]]  # every agent sequence, each sampled id once, no tool result
    assert sorted(e["metadata"]["call"] for e in trace.to_trace_entries()) == [0, 1, 2]
    untrainable = training_trace(export_rollout(tmp_path / "t.jsonl", "r"), trainable=False)
    assert not any(m for t in untrainable.turns for m in t.loss_mask)


def test_the_workers_penalties_are_refused_unless_neutral():
    settings = trainer_model_settings(
        SimpleNamespace(temperature=0.7, top_p=1.0, top_k=-1, min_p=0.0, repetition_penalty=1.0)
    )
    runner = SimpleNamespace(config=SimpleNamespace(expect_logprobs="processed", model_settings=settings))
    # What TRL's worker passes through OpenEnv's training_sampling: the policy fields plus neutral penalties.
    policy = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
    check_worker_sampling(runner, policy | {"frequency_penalty": 0.0, "presence_penalty": 0.0})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"sets presence_penalty=0.5, which agentbake's gateway does not apply"):
        check_worker_sampling(runner, policy | {"presence_penalty": 0.5})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"sets seed=3"):
        check_worker_sampling(runner, policy | {"seed": 3})  # type: ignore[arg-type]


def test_runner_sessions_pickle_as_settings_and_a_bound_runner_refuses(tmp_path):
    config = RunnerConfig(image="agentbake/claude-code:abc", model=["http://a:1/v1", "http://b:2/v1"])
    sessions = RunnerSessions(config, [tmp_path / "tasks"])
    copy = pickle.loads(pickle.dumps(sessions))  # what TRL's worker start does before spawning its process
    assert (copy.config, copy.tasks, copy.backend) == (config, [tmp_path / "tasks"], None)
    runner = SimpleNamespace(config=config)
    write_task(tmp_path / "tasks", "one", solve="true\n", test="exit 0\n")
    bound = session_factory(runner, [tmp_path / "tasks"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"pass RunnerSessions\(runner_config, tasks\) instead"):
        pickle.dumps(bound)


def test_trainer_settings_take_token_in_and_leave_sampling_to_the_trainer(tmp_path):
    args = SimpleNamespace(temperature=0.7, top_p=0.9, top_k=-1, min_p=0.0, repetition_penalty=1.0)
    settings = trainer_model_settings(args, tokenizer=tmp_path, token_in=True, inner_system_as_user=True)
    assert (settings.tokenizer, settings.token_in, settings.inner_system_as_user) == (tmp_path, True, True)
    assert (settings.temperature, settings.top_p) == (0.7, 0.9)
    with pytest.raises(ConfigError, match=r"temperature come from the trainer's args; drop them here"):
        trainer_model_settings(args, temperature=1.0)
