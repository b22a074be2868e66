"""Claude Code as baked in the claude-code image, run as its non-root user, through the gateway.

The container shares the host's network namespace so that the gateway and the scripted upstream
stay on loopback; it runs with every capability dropped and no-new-privileges.
"""

from __future__ import annotations

import docker
import orjson
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.scripted import Reply
from tests.gateway.conftest import RunningGateway, Upstream

pytestmark = pytest.mark.docker


def test_baked_claude_code_runs_a_task_through_the_gateway(
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    make_gateway,
    upstream: Upstream,
) -> None:
    def agent(request: dict) -> Reply:
        """A Bash call first, then the final answer."""
        if any(m.get("tool_calls") for m in request["messages"] if m["role"] == "assistant"):
            return Reply(text="All done.")
        return Reply(text="Running it.", tool_calls=[("Bash", {"command": "id -u > proof.txt"})])

    upstream.fake.responder = agent
    gw: RunningGateway = make_gateway(model_override="fake-model", read_timeout_s=60.0)
    tag = built_images["claude-code"].tag
    labels = engine.images.get(tag).labels
    env = {
        "ANTHROPIC_BASE_URL": gw.url + "/r/image-e2e",
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "2",
    }
    container = engine.containers.run(
        tag,
        ["sleep", "300"],
        detach=True,
        network_mode="host",
        environment=env,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit="2g",
        pids_limit=512,
    )
    try:
        command = f"{labels['dev.agentbake.agent.command']} -p --output-format json --dangerously-skip-permissions"
        exit_code, (stdout, stderr) = container.exec_run(
            ["sh", "-c", f"echo 'Record your uid in proof.txt.' | {command} --model claude-sonnet-4-5"],
            workdir=labels["dev.agentbake.dir.workdir"],
            demux=True,
        )
        assert exit_code == 0, (stdout or b"")[-2000:] + (stderr or b"")[-2000:]
        assert orjson.loads(stdout)["result"] == "All done."
        proof = container.exec_run(["cat", f"{labels['dev.agentbake.dir.workdir']}/proof.txt"]).output
        assert proof.decode().strip() == labels["dev.agentbake.uid"]  # the tool ran as the non-root user
    finally:
        container.remove(force=True)

    records = gw.records()
    assert len(records) == len(upstream.fake.requests) == 2
    sent = zip(upstream.fake.emitted, upstream.fake.emitted_logprobs, strict=True)
    for record, (emitted, logprobs) in zip(records, sent, strict=True):
        assert record.rollout_id == "image-e2e" and record.dialect == "anthropic"
        assert record.completion_token_ids == emitted and record.per_token_logps == logprobs
