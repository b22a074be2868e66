"""Each agent's launch, applied to its real image, against a real gateway: one run per agent.

Shows that the env, config files and script the agent modules describe make the baked CLI call its
shell tool through the gateway, get the result back, finish with exit 0 and write its log, holding
only the per-rollout token while the upstream key stays with the gateway.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path
from urllib.parse import urlsplit

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.scripted import Fault, Reply
from tests.runner.agents.conftest import PROOF_COMMAND, AgentRun, free_port, run_agent
from tests.runner.rollouts import with_deltas_joined

pytestmark = pytest.mark.docker


def test_agent_runs_its_shell_tool_and_exits_zero(agent_run: AgentRun) -> None:
    assert agent_run.exit_code == 0, agent_run.stdout[-3000:] + agent_run.stderr[-3000:] + str(agent_run.logs)[-3000:]
    # The tool ran in the workdir as the image's non-root user.
    assert agent_run.workdir_files.get("proof.txt", "").strip() == agent_run.labels["dev.agentbake.uid"]
    requests = agent_run.upstream.requests
    assert len(requests) == 2, [r["messages"][-1] for r in requests]
    tool_results = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1 and "proof-written" in str(tool_results[0]["content"])
    assert "All done." in with_deltas_joined(agent_run.stdout)


def test_agent_is_offered_its_shell_tool_and_no_web_tool(agent_run: AgentRun) -> None:
    offered = {tool["function"]["name"] for tool in agent_run.upstream.requests[0]["tools"]}
    assert agent_run.agent.shell_tool in offered
    assert not {name for name in offered if "web" in name.lower()}, offered


def test_agent_log_is_written_in_the_agent_log_dir(agent_run: AgentRun) -> None:
    log = agent_run.logs.get(agent_run.launch.log_file, "")
    assert agent_run.launch.log_file.startswith(agent_run.image.logs_dir + "/")
    assert (
        "All done." in with_deltas_joined(log) and log == agent_run.stdout
    )  # tee'd: the harness's stdout and the log file agree
    assert agent_run.launch.stderr_file in agent_run.logs
    # What the agent did (the tool call and its result) is in a collected file (the log or a transcript).
    assert any(PROOF_COMMAND in text and "proof-written" in text for text in agent_run.logs.values())


def test_only_the_token_reaches_the_gateway_and_only_the_key_reaches_upstream(agent_run: AgentRun) -> None:
    assert agent_run.gateway_requests
    for path, headers in agent_run.gateway_requests:
        credential = (
            headers.get("x-api-key")
            or headers.get("x-goog-api-key")
            or headers.get("authorization", "").removeprefix("Bearer ")
        )
        assert credential == agent_run.token, (path, sorted(headers))
    for headers, body in zip(agent_run.upstream.headers, agent_run.upstream.requests, strict=True):
        assert headers["authorization"] == f"Bearer {agent_run.upstream_key}"
        assert agent_run.token not in str(headers) and agent_run.token not in str(body)
    rollout = f"agents-{agent_run.agent.name}"
    assert [record.rollout_id for record in agent_run.trace] == [rollout, rollout]
    assert all(record.completion_token_ids for record in agent_run.trace)


def test_no_upstream_key_and_no_token_in_output_or_argv(agent_run: AgentRun) -> None:
    for text in [agent_run.stdout, agent_run.stderr, *agent_run.logs.values()]:
        assert agent_run.upstream_key not in text
    assert agent_run.token not in " ".join(agent_run.launch.argv)


@pytest.mark.parametrize("name", ["gemini-cli", "qwen-code"])
def test_a_node_agent_connects_to_its_gateway_and_looks_up_no_host(
    name: str,
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Node's own log of every TCP connection and host lookup (`NODE_DEBUG=net`, fetch's included) names the
    gateway alone: no call to Google's or Alibaba's hosts, not even one that would fail with no route out."""
    run = run_agent(engine, built_images, name, tmp_path, monkeypatch, extra_env={"NODE_DEBUG": "net"})
    assert run.exit_code == 0, run.stderr[-3000:]
    gateway = urlsplit(run.launch.env.get("GOOGLE_GEMINI_BASE_URL") or run.launch.env["OPENAI_BASE_URL"]).netloc
    assert set(re.findall(r"connect: attempting to connect to (\S+)", run.stderr)) == {gateway}
    assert re.findall(r"connect: find host (\S+)", run.stderr) == []


MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def fenced_then_submit(request: dict) -> Reply:
    """mini-swe-agent's model: the proof command in its fenced block, then, once observed, its submit command."""
    answered = any(message["role"] == "assistant" for message in request["messages"])
    return Reply(text=f"Running it.\n\n```mswea_bash_command\n{MINI_SUBMIT if answered else PROOF_COMMAND}\n```")


def test_mini_swe_agent_runs_its_fenced_command_and_submits(
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No tools on the wire: the command comes from the answer's fenced block, its output goes back as a user
    message, the submit command ends the run with exit 0; only the token reaches the gateway."""
    run = run_agent(engine, built_images, "mini-swe-agent", tmp_path, monkeypatch, responder=fenced_then_submit)
    assert run.exit_code == 0, run.stderr[-3000:]
    requests = run.upstream.requests
    assert len(requests) == 2 and not any(request.get("tools") for request in requests)
    observation = requests[-1]["messages"][-1]
    assert observation["role"] == "user" and "proof-written" in observation["content"]
    assert run.workdir_files["proof.txt"] == "1000\n"  # run as the image's user, in the workdir
    trajectory = json.loads(run.logs[posixpath.join(run.image.logs_dir, "mini-swe-agent.traj.json")])
    assert trajectory["info"]["exit_status"] == "Submitted" and trajectory["info"]["model_stats"]["api_calls"] == 2
    assert {headers["authorization"] for _, headers in run.gateway_requests} == {f"Bearer {run.token}"}
    assert all(headers["authorization"] == f"Bearer {run.upstream_key}" for headers in run.upstream.headers)
    assert run.token not in run.stdout + run.stderr and run.upstream_key not in run.stdout + run.stderr


# Gemini CLI ends a run its model refused with its own status, 144.
@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("claude-code", 1),
        ("codex", 1),
        ("gemini-cli", 144),
        ("mini-swe-agent", 1),
        ("opencode", 1),
        ("pi", 1),
        ("qwen-code", 1),
    ],
)
def test_a_model_that_refuses_every_call_fails_the_run(
    name: str,
    status: int,
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refuse = Fault(status=400, message="scripted refusal")
    run = run_agent(engine, built_images, name, tmp_path, monkeypatch, responder=lambda request: refuse)
    assert run.upstream.requests  # the agent did ask
    assert run.exit_code == status, run.stdout[-2000:]
    assert run.launch.log_file in run.logs and "proof.txt" not in run.workdir_files
    # stderr is kept in the log dir and still reaches the caller, for the harness's error message
    assert run.stderr == run.logs[run.launch.stderr_file]


def test_unreachable_model_fails_the_run_through_pipefail(
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = run_agent(
        engine,
        built_images,
        "claude-code",
        tmp_path,
        monkeypatch,
        model_url=f"http://127.0.0.1:{free_port()}",
        extra_env={"CLAUDE_CODE_MAX_RETRIES": "0"},  # fail at once instead of backing off for minutes
    )
    assert run.exit_code != 0, run.stdout[-2000:]
    assert run.launch.log_file in run.logs  # tee still wrote the log; the status came from the agent
    assert "proof.txt" not in run.workdir_files and not run.upstream.requests
