"""`--gateway sandbox`'s trace: fetched from the sandbox as it is written, so a sandbox that dies keeps its
records on the trainer's side. On the E2B fake (tests/runner/fakes/), whose sandbox is a local container."""

from __future__ import annotations

import time
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.runner.remote.e2b import E2BBackend
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.sandbox_gateway import TraceFetcher
from agentbake.runner.sandbox import SandboxRequest
from tests.runner.fakes.containers import LocalMachines, facts_of
from tests.runner.fakes.servers import fake_e2b

pytestmark = pytest.mark.docker


def wait_for(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_trace_is_fetched_as_written_and_survives_the_sandbox(
    monkeypatch: pytest.MonkeyPatch,
    machines: LocalMachines,
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    tmp_path: Path,
) -> None:
    tag = built_images["claude-code"].tag
    template = f"claude-code:{tag.rsplit(':', 1)[1]}"
    local = tmp_path / "out" / "trace.jsonl"
    with fake_e2b(monkeypatch, machines, {template: (tag, "agent")}) as fake:
        backend = E2BBackend(E2BConfig(template=template), image_facts=facts_of(engine, tag))
        sandbox = backend.create(SandboxRequest(image=tag, rollout_id="r-1"))
        fetcher = TraceFetcher(sandbox, "/root/trace.jsonl", local, interval_s=0.1)
        sandbox.exec('printf \'{"turn": 0}\\n{"turn": 1}\\n{"tu\' > /root/trace.jsonl', user="root")
        wait_for(lambda: local.exists() and local.read_text().count("\n") == 2)
        assert local.read_text() == '{"turn": 0}\n{"turn": 1}\n'  # a line still being written waits
        sandbox.exec("printf 'rn\": 2}\\n' >> /root/trace.jsonl", user="root")
        wait_for(lambda: local.read_text().count("\n") == 3)
        machines.api.kill(fake.sandboxes[sandbox.sandbox_id].machine.container_id)  # it dies mid-rollout
        fetcher.finish()  # logs the failed last fetch, keeps what it has
        assert local.read_text().splitlines() == ['{"turn": 0}', '{"turn": 1}', '{"turn": 2}']
        backend.close()
        assert fake.alive == 0


def test_the_model_settings_reach_the_in_sandbox_gateway_as_its_own_options() -> None:
    from agentbake.gateway.cli import gateway
    from agentbake.gateway.model_settings import ModelSettings
    from agentbake.runner.remote.sandbox_gateway import settings_argv

    settings = ModelSettings(
        inner_system_as_user=True, tool_call_parser="qwen3_coder", temperature=0.6, top_k=0, repetition_penalty=1.1
    )
    argv = settings_argv(settings)
    assert argv == [
        "--inner-system-as-user",
        *("--tool-call-parser", "qwen3_coder"),
        *("--temperature", "0.6", "--top-k", "0", "--repetition-penalty", "1.1"),
    ]
    parsed = gateway.make_context("gateway", ["--upstream", "http://127.0.0.1:1/v1", *argv]).params
    assert ModelSettings(**{name: parsed[name] for name in ModelSettings.model_fields}) == settings
