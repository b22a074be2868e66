"""Choosing among a runner's model workers without a sandbox: each worker's preflight, the least busy worker
taking the next rollout, and a worker's name as records carry it."""

from __future__ import annotations

import pytest

from agentbake.errors import PreflightError
from agentbake.runner.model.gateways import RolloutGateways
from agentbake.runner.model.workers import ModelWorkerError, worker_label
from agentbake.runner.runner_config import RunnerConfig
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread


def test_a_workers_name_drops_its_credentials() -> None:
    assert worker_label("http://user:secret@gpu1:8000/v1") == "http://gpu1:8000/v1"
    assert worker_label("https://[::1]:8443/v1/") == "https://[::1]:8443/v1/"


def test_each_worker_has_its_preflight_and_their_logprobs_must_agree() -> None:
    raw, processed = ScriptedModel(), ScriptedModel()
    processed.logprobs_mode = "processed"
    with serve_in_thread(raw, log_level="critical") as one, serve_in_thread(processed, log_level="critical") as two:
        urls = [f"{one.url}/v1", f"{two.url}/v1"]
        with pytest.raises(PreflightError, match=rf"model workers {urls[0]} and {urls[1]} send different logprobs"):
            RolloutGateways(RunnerConfig(image="x:1", model=urls, model_name="m"), lambda *_: None)
        assert len([p for p in processed.paths if p.endswith("/chat/completions")]) >= 2  # the second was probed


def test_the_least_busy_worker_takes_the_next_rollout_and_a_failed_one_none() -> None:
    models = [ScriptedModel(), ScriptedModel()]
    with (
        serve_in_thread(models[0], log_level="critical") as one,
        serve_in_thread(models[1], log_level="critical") as two,
    ):
        config = RunnerConfig(image="x:1", model=[f"{one.url}/v1", f"{two.url}/v1"], model_name="m", preflight=False)
        gateways = RolloutGateways(config, lambda *_: None)
        try:
            workers = gateways.workers
            picked = [workers.pick(rollout).label for rollout in ("a", "b")]
            assert sorted(picked) == sorted([f"{one.url}/v1", f"{two.url}/v1"])  # one each
            assert workers.pick("c").label in picked  # a tie: either
            workers.done("c")
            assert workers.done("a").label == picked[0]
            assert workers.pick("d").label == picked[0]  # "a" freed its worker, "b" still holds the other
            for worker in workers.all:
                worker.failure = "gone"
            with pytest.raises(ModelWorkerError, match="every model worker has failed"):
                workers.pick("e")
        finally:
            gateways.close()
