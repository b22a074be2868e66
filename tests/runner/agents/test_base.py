"""The agent registry and the launch each agent describes, without an engine."""

from __future__ import annotations

import json
import tomllib

import pytest

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.labels import ImageLabels
from agentbake.errors import AgentError
from agentbake.runner.agents import AgentImage, ModelAccess, agent_for_labels, agents, get_agent, headless_launch
from agentbake.runner.harness.listeners import KILL_BUT_SERVICES

HOME = "/sandbox/u"
LABELS = ImageLabels(
    agent_name="claude-code",
    agent_package="@anthropic-ai/claude-code",
    agent_version="1.0.0",
    agent_command="agentcli",
    spec_hash="0" * 64,
    builder_version="0.0.0",
    user="u",
    uid=1000,
    home=HOME,
    python="/opt/agentbake/venv/bin/python",
    dir_workdir=f"{HOME}/work",
    dir_task=f"{HOME}/task",
    dir_logs_agent=f"{HOME}/out/agent",
    dir_logs_verifier=f"{HOME}/out/verifier",
)
MODEL = ModelAccess(model_url="http://10.9.8.7:4321/r/abc/", token="tok-secret-123", model_name="Qwen/Qwen3-8B")


def test_every_catalog_image_has_a_registered_agent(catalog: Catalog) -> None:
    specs = catalog.load_all()
    assert {spec.name for spec in specs} == set(agents())
    for spec in specs:
        labels = LABELS.model_copy(update={"agent_package": spec.agent.package})
        assert agent_for_labels(labels) is get_agent(spec.name)


@pytest.mark.parametrize(
    "name", ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"]
)
def test_launch_paths_come_from_home_and_labels(name: str) -> None:
    launch = get_agent(name).launch(AgentImage.from_labels(LABELS), MODEL, "do the task")
    assert launch.argv[:2] == ["bash", "-c"]
    assert launch.script.startswith("set -o pipefail\n")
    assert "agentcli " in launch.script and "/home/agent" not in launch.script
    assert launch.log_file.startswith(f"{HOME}/out/agent/") and launch.log_file in launch.script
    assert launch.instruction_file.startswith(f"{HOME}/out/agent/")
    assert f"< {launch.instruction_file}" in launch.script  # the instruction arrives on stdin
    assert launch.files[launch.instruction_file.removeprefix(HOME + "/")] == "do the task"
    assert all(path.startswith(HOME + "/") for path in launch.log_paths)
    assert launch.env["HOME"] == HOME
    assert not any(path.startswith("/") for path in launch.files)


@pytest.mark.parametrize(
    "name", ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"]
)
def test_token_is_the_agents_api_key_and_never_on_argv(name: str) -> None:
    launch = get_agent(name).launch(AgentImage.from_labels(LABELS), MODEL, "do the task")
    assert MODEL.token not in " ".join(launch.argv)
    holders = [value for value in launch.env.values() if MODEL.token in value]
    holders += [content for content in launch.files.values() if MODEL.token in content]
    assert len(holders) == 1


def test_openai_agents_get_the_v1_base_and_the_model_name() -> None:
    opencode = get_agent("opencode").launch(AgentImage.from_labels(LABELS), MODEL, "x")
    config = json.loads(opencode.files[".config/opencode/opencode.json"])
    assert config["provider"]["agentbake"]["options"]["baseURL"] == "http://10.9.8.7:4321/r/abc/v1"
    assert config["model"] == "agentbake/Qwen/Qwen3-8B"
    pi = get_agent("pi").launch(AgentImage.from_labels(LABELS), MODEL, "x")
    models = json.loads(pi.files[".pi/agent/models.json"])
    assert models["providers"]["agentbake"]["baseUrl"] == "http://10.9.8.7:4321/r/abc/v1"
    assert "--model Qwen/Qwen3-8B" in pi.script


def test_codex_gets_a_provider_of_the_v1_base_and_the_token_by_env() -> None:
    launch = get_agent("codex").launch(AgentImage.from_labels(LABELS), MODEL, "x")
    config = tomllib.loads(launch.files[".codex/config.toml"])
    provider = config["model_providers"][config["model_provider"]]
    assert (config["model"], provider["base_url"]) == ("Qwen/Qwen3-8B", "http://10.9.8.7:4321/r/abc/v1")
    assert (provider["wire_api"], provider["supports_websockets"]) == ("responses", False)
    assert launch.env[provider["env_key"]] == MODEL.token
    assert (
        "exec --strict-config --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check --json -"
        in launch.script
    )


def test_gemini_cli_gets_the_bare_base_the_token_by_env_and_the_api_key_auth() -> None:
    launch = get_agent("gemini-cli").launch(AgentImage.from_labels(LABELS), MODEL, "x")
    # The SDK appends `/v1beta/models/...` itself.
    assert launch.env["GOOGLE_GEMINI_BASE_URL"] == "http://10.9.8.7:4321/r/abc"
    assert (launch.env["GEMINI_API_KEY"], launch.env["GEMINI_CLI_TRUST_WORKSPACE"]) == (MODEL.token, "true")
    settings = json.loads(launch.files[".gemini/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert "--yolo --model Qwen/Qwen3-8B --output-format stream-json <" in launch.script


def test_qwen_code_gets_the_v1_base_the_token_and_the_model_by_env() -> None:
    launch = get_agent("qwen-code").launch(AgentImage.from_labels(LABELS), MODEL, "x")
    assert launch.env["OPENAI_BASE_URL"] == "http://10.9.8.7:4321/r/abc/v1"
    assert (launch.env["OPENAI_API_KEY"], launch.env["OPENAI_MODEL"]) == (MODEL.token, "Qwen/Qwen3-8B")
    settings = json.loads(launch.files[".qwen/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "openai"
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert "--yolo --auth-type openai --model Qwen/Qwen3-8B --output-format stream-json <" in launch.script


def test_mini_swe_agent_gets_the_v1_base_in_its_config_the_token_by_env_and_the_task_from_stdin() -> None:
    launch = get_agent("mini-swe-agent").launch(AgentImage.from_labels(LABELS), MODEL, "x")
    config = json.loads(launch.files[".config/mini-swe-agent/agentbake.yaml"])  # JSON is YAML
    assert config["model"]["model_kwargs"] == {"api_base": "http://10.9.8.7:4321/r/abc/v1"}
    assert config["model"]["model_class"] == "litellm_textbased" and config["model"]["cost_tracking"] == "ignore_errors"
    assert config["agent"]["cost_limit"] == 0 and config["environment"]["timeout"] == 600
    assert launch.env["OPENAI_API_KEY"] == MODEL.token and launch.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert "--config mini_textbased.yaml --config /sandbox/u/.config/mini-swe-agent/agentbake.yaml" in launch.script
    assert "--model openai/Qwen/Qwen3-8B --yolo --exit-immediately --output /sandbox/u/out/agent/" in launch.script
    assert launch.script.count(" < /sandbox/u/out/agent/instruction.md ") == 1  # the task: stdin, through "$(cat)"


def test_sandbox_home_wins_over_the_home_label() -> None:
    labels = LABELS.model_copy(update={"dir_logs_agent": "/root/out/agent", "dir_workdir": "/root/w"})
    image = AgentImage.from_labels(labels, home="/root")
    assert get_agent("pi").launch(image, MODEL, "x").env["HOME"] == "/root"


def test_log_dir_outside_home_is_refused() -> None:
    image = AgentImage.from_labels(LABELS.model_copy(update={"dir_logs_agent": "/var/log/agent"}))
    with pytest.raises(AgentError, match=r"/var/log/agent/instruction\.md is outside the sandbox's home /sandbox/u"):
        get_agent("claude-code").launch(image, MODEL, "x")


def test_unknown_agents_are_refused_with_the_known_ones() -> None:
    known = "claude-code, codex, gemini-cli, mini-swe-agent, opencode, pi, qwen-code"
    with pytest.raises(AgentError, match=rf"unknown agent 'aider'; known agents: {known}"):
        get_agent("aider")
    with pytest.raises(AgentError, match=r"no harness for the agent package 'aider-chat'.*opencode-ai \(opencode\)"):
        agent_for_labels(LABELS.model_copy(update={"agent_package": "aider-chat"}))


def test_headless_launch_runs_any_command_the_same_way() -> None:
    solve = f"{HOME}/task/solution/solve it.sh"
    launch = headless_launch(AgentImage.from_labels(LABELS), "oracle", ["bash", solve], "x", env={"TASK": "1"})
    assert f"bash '{solve}' < {HOME}/out/agent/instruction.md" in launch.script
    assert launch.log_file == f"{HOME}/out/agent/oracle.log" and launch.env == {"HOME": HOME, "TASK": "1"}
    # What it left dies with it, but its services (processes holding a listening socket: listeners.py); never as root.
    assert launch.script.endswith(
        f'[ "$PPID" != 0 ] || [ "$EUID" = 0 ] || {{ set -- "$(id -u)"\n{KILL_BUT_SERVICES}}}\nexit $status'
    )
