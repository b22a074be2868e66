"""Several workers of one model: each rollout's calls all go to one worker (as the records and the workers' own
logs say), a worker that dies ends its rollout as `model_error` naming it while the others finish, and the
trainer's policy version reaches a live rollout's next calls."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.gateway import read_trace
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.scripted import Fault, ScriptedModel
from agentbake.serve import serve_in_thread
from agentbake.tasks import load_task
from tests.runner.rollouts import EXAMPLES

pytestmark = pytest.mark.docker


def test_each_rollout_stays_on_its_worker_and_a_dead_workers_rollout_fails_visibly(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    task = load_task(EXAMPLES / "write-file")
    models = [ScriptedModel(tasks=[task.path]) for _ in range(3)]
    dying = models[2]
    mark = task.instruction.strip()[:40]  # in every call of the task's conversation, in no preflight call
    policy, died = dying.responder, threading.Event()

    def die_on_the_task(request: dict) -> object:
        """The third worker answers the preflight, then dies at the agent's first call (a 500, then nothing)."""
        if mark in json.dumps(request.get("messages")) and not died.is_set():
            died.set()
            threading.Thread(target=servers[2].stop, daemon=True).start()
            return Fault(status=500, message="the worker lost its GPU")
        return policy(request)

    dying.responder = die_on_the_task
    first, moved = models[0].responder, threading.Event()

    def move_the_policy_at_the_first_call(request: dict) -> object:
        """The trainer syncs its weights while the first worker answers its rollout's first call."""
        if mark in json.dumps(request.get("messages")) and not moved.is_set():
            moved.set()
            runner.set_policy_version(8)
        return first(request)

    models[0].responder = move_the_policy_at_the_first_call
    servers = [serve_in_thread(model, log_level="critical") for model in models]
    try:
        urls = [f"{server.url}/v1" for server in servers]
        config = RunnerConfig(
            image=built_images["claude-code"].tag, model=urls, model_name="scripted", out_dir=tmp_path
        )
        with Runner(config, agent_backend) as runner:
            runner.set_policy_version(7)
            results = runner.run_batch([task], repeats=3, concurrency=3)
    finally:
        for server in servers[:2]:
            server.stop()

    by_worker = {r.worker: r for r in results}
    assert sorted(by_worker) == sorted(urls)  # one rollout per worker: the least busy takes the next
    lost = by_worker[urls[2]]
    assert lost.status is Status.MODEL_ERROR, (lost.status, lost.error)
    assert f"model worker {urls[2]} failed" in (lost.error or "") and "not moved" in (lost.error or "")
    assert json.loads((lost.out_dir / "result.json").read_text())["status"] == "model_error"
    for url, model in zip(urls, models, strict=True):
        result = by_worker[url]
        records = read_trace(result.out_dir / "trace.jsonl")
        assert records and {r.worker for r in records} == {url}  # every call of the rollout on its worker
        if url == urls[2]:
            assert all(not r.ok for r in records[-1:])  # its calls failed there; none went to another worker
            continue
        assert result.status is Status.OK and result.reward == 1.0, result.error
        if url == urls[0]:  # the live rollout's later calls carry the version the trainer moved to
            task_calls = [r.policy_version for r in records if mark in json.dumps(r.request.get("messages"))]
            assert task_calls[0] == 7 and task_calls[-1] == 8 and len(task_calls) >= 2
        # The worker's own log: exactly the task's calls its rollout's records hold (the preflight's calls aside).
        served = [
            ids
            for request, ids in zip(model.requests, model.emitted, strict=True)
            if mark in json.dumps(request.get("messages"))
        ]
        recorded = [r.completion_token_ids for r in records if mark in json.dumps(r.request.get("messages"))]
        assert Counter(map(tuple, served)) == Counter(map(tuple, recorded)) and len(served) >= 2
