"""The runner's preflight: a model server whose answers cannot be captured stops the runner before any
sandbox starts; the logprobs mode it finds is stamped on every record and gates `trainable`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from agentbake.errors import PreflightError
from agentbake.export import export_rollout
from agentbake.gateway import read_trace
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread
from agentbake.tasks import load_task
from tests.runner.rollouts import EXAMPLES, leftovers

pytestmark = pytest.mark.docker


@pytest.fixture
def serve() -> Iterator[Callable[[object], str]]:
    """Serve a model (an ASGI app) on loopback for the test; returns its /v1 URL."""
    servers = []

    def start(app: object) -> str:
        servers.append(serve_in_thread(app, log_level="critical"))
        return servers[-1].url + "/v1"

    yield start
    for server in servers:
        server.stop()


def test_a_server_without_logprobs_stops_the_runner_before_any_sandbox(
    image: str, engine: docker.DockerClient, serve, tmp_path: Path
) -> None:
    model = ScriptedModel()
    model.ignore_fields = {"logprobs", "top_logprobs"}
    url = serve(model)
    before = leftovers(engine, "")
    config = RunnerConfig(image=image, model=url, model_name="m", out_dir=tmp_path)
    with pytest.raises(PreflightError) as caught:
        Runner(config)
    message = str(caught.value)
    assert message.startswith(f"model {url}: preflight failed") and "the server ignores `logprobs: true`" in message
    assert "--no-preflight (RunnerConfig.preflight)" in message
    assert caught.value.report.verdict == "not capturable"
    assert leftovers(engine, "") == before  # no backend, no gateway, no sandbox was made
    assert all(request["model"] == "m" for request in model.requests)  # probed as the gateways will call

    Runner(config.model_copy(update={"preflight": False})).close()  # an evaluation may run without capture


def test_a_logprobs_mode_the_server_contradicts_stops_the_runner(image: str, serve, tmp_path: Path) -> None:
    model = ScriptedModel()
    model.logprobs_mode = "processed"
    config = RunnerConfig(image=image, model=serve(model), logprobs_mode="raw", out_dir=tmp_path)
    with pytest.raises(PreflightError, match=r"the logprobs are processed .* told --logprobs-mode raw"):
        Runner(config)


def test_processed_logprobs_are_stamped_and_trainable_only_for_a_trainer_expecting_them(
    image: str, backend: DockerBackend, serve, tmp_path: Path
) -> None:
    task = load_task(EXAMPLES / "write-file")
    model = ScriptedModel(tasks=[task])
    model.logprobs_mode = "processed"
    config = RunnerConfig(image=image, model=serve(model), expect_logprobs="processed", out_dir=tmp_path)
    with Runner(config, backend) as runner:
        result = runner.run(task)
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error
    trace = result.out_dir / "trace.jsonl"
    assert {record.logprobs_mode for record in read_trace(trace)} == {"processed"}
    document = json.loads((result.out_dir / "sequences.json").read_text())
    assert result.trainable is True and document["validation"]["trainable"] is True

    expecting_raw = export_rollout(trace, result.rollout_id, logprobs="raw")
    assert expecting_raw["validation"]["trainable"] is False
    assert "logprobs_mode" in json.dumps(expecting_raw["validation"])
