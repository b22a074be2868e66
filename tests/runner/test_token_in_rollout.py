"""A whole rollout with token-in on (`ModelSettings(tokenizer=..., token_in=True)`): the real Claude Code in its
image, the rollout's gateway, and the scripted model answering in a real tokenizer's ids and sampling non-canonical
tokenizations (so the chat route's re-tokenization would drift). The exported sequence is exactly what was sampled."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.gateway import check, read_trace
from agentbake.gateway.model_settings import ModelSettings
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread
from agentbake.tasks import load_task
from tests.runner.rollouts import EXAMPLES
from tests.tiny_tokenizer import build_tokenizer

pytestmark = pytest.mark.docker


def test_a_claude_code_rollout_through_token_in_exports_exactly_the_sampled_ids(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    tokenizer = build_tokenizer(tmp_path / "tokenizer")
    task = load_task(EXAMPLES / "multi-step-report")
    model = ScriptedModel(tasks=[task], tokenizer=tokenizer, piecewise=True)
    with serve_in_thread(model, log_level="critical") as served:
        config = RunnerConfig(
            image=built_images["claude-code"].tag,
            model=served.url + "/v1",
            model_name="scripted",
            out_dir=tmp_path / "out",
            model_settings=ModelSettings(tokenizer=tokenizer, token_in=True),
        )
        with Runner(config, agent_backend) as runner:
            result = runner.run(task)
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error

    records = read_trace(result.out_dir / "trace.jsonl")
    agent = [r for r in records if r.request.get("tools")]
    assert len(agent) >= 4  # the solve.sh's steps, then the closing text
    assert agent[0].token_in["route"] == "chat"
    assert all(r.token_in["route"] == "completions" for r in agent[1:]), [r.token_in for r in agent]
    assert all(r.prefix == {"previous_turn": p.turn, "extends": True} for p, r in itertools.pairwise(agent))
    (rollout,) = check(records)
    assert rollout.consistent

    # The export holds one agent sequence: the ids the model sampled, where it sampled them, nothing re-derived.
    document = json.loads((result.out_dir / "sequences.json").read_text())
    (sequence,) = [s for s in document["sequences"] if s["role"] == "agent"]
    assert sequence["trainable"]
    sampled = {tuple(ids) for request, ids in zip(model.requests, model.emitted, strict=True) if "prompt" in request}
    trained = [i for i, m in zip(sequence["input_ids"], sequence["loss_mask"], strict=True) if m]
    assert trained == [i for r in agent for i in r.completion_token_ids]
    assert {tuple(r.completion_token_ids) for r in agent[1:]} <= sampled  # as the model emitted them
    assert sequence["input_ids"] == agent[-1].prompt_token_ids + agent[-1].completion_token_ids
