"""`agentbake gateway` as a real process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.gateway import GatewayConfig, read_trace


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_gateway_process_serves_records_and_keeps_the_key_off_argv(upstream, tmp_path):
    port = _free_port()
    trace = tmp_path / "trace.jsonl"
    agentbake = Path(sys.executable).with_name("agentbake")
    env = {**os.environ, "AGENTBAKE_UPSTREAM_API_KEY": "sk-never-on-argv"}
    args = [
        str(agentbake),
        "gateway",
        "--upstream",
        upstream.url + "/v1",
        "--trace",
        str(trace),
        "--port",
        str(port),
    ]
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            pytest.fail("gateway did not come up")
        assert b"sk-never-on-argv" not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
        body = {"model": "c", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        response = httpx.post(url + "/v1/messages", json=body)
        assert response.status_code == 200 and response.json()["content"][0]["type"] == "text"
        assert upstream.fake.headers[-1]["authorization"] == "Bearer sk-never-on-argv"
        assert read_trace(trace)[0].completion_token_ids == upstream.fake.emitted[0]
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=10)[0]
    assert b"sk-never-on-argv" not in output and b"sk-never-on-argv" not in trace.read_bytes()


def test_bad_settings_are_a_clean_error(tmp_path):
    result = CliRunner().invoke(main, ["gateway", "--upstream", "not-a-url"])
    assert result.exit_code == 1 and "upstream must be an http:// or https:// URL" in result.output
    empty = tmp_path / "key"
    empty.write_text("")
    result = CliRunner().invoke(main, ["gateway", "--upstream", "http://x/v1", "--api-key-file", str(empty)])
    assert result.exit_code == 1 and "is empty" in result.output


def test_lean_module_entry_point_runs_the_same_command():
    result = subprocess.run(
        [sys.executable, "-m", "agentbake.gateway", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "--upstream" in result.stdout and "--model-override" in result.stdout
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, agentbake.gateway.cli, agentbake.gateway.app; print({'docker', 'httpx'} & set(sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The gateway never pulls in the build kit, nor httpx (no longer in the `gateway` dependencies).
    assert imported.stdout.strip() == "set()"


def test_every_option_reaches_the_config(monkeypatch, tmp_path):
    import agentbake.serve

    served = {}
    monkeypatch.setattr(agentbake.serve, "serve", lambda app, **kwargs: served.update(app=app, **kwargs))
    monkeypatch.setenv("ROLLOUT_TOKEN", "t" * 20)
    args = ["gateway", "--upstream", "http://127.0.0.1:1/v1", "--trace", str(tmp_path / "t.jsonl"), "--port", "9"]
    args += ["--model-override", "qwen", "--max-tokens-cap", "0", "--disable-thinking", "--keep-billing-header"]
    args += ["--inner-system-as-user"]
    args += ["--no-logprobs", "--top-logprobs", "3", "--no-token-ids", "--max-body-bytes", "4096"]
    args += ["--read-timeout", "5", "--connect-timeout", "2", "--max-connections", "7", "--tokenize-url", "http://t/x"]
    args += ["--uds", str(tmp_path / "gw.sock"), "--rollout-id", "r-1", "--client-token-env", "ROLLOUT_TOKEN"]
    args += ["--max-completion-tokens-model", "my-o*", "--host", "127.0.0.2", "--log-level", "error"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    config = served["app"].config
    assert (served["host"], served["port"], served["uds"], served["log_level"]) == (
        "127.0.0.2",
        9,
        tmp_path / "gw.sock",
        "error",
    )
    assert config.model_override == "qwen" and config.max_tokens_cap is None and config.disable_thinking
    assert config.inner_system_as_user
    assert not (config.drop_billing_header or config.capture_logprobs or config.tokens_as_token_ids)
    assert not config.request_token_ids and config.top_logprobs == 3 and config.max_body_bytes == 4096
    assert (config.read_timeout_s, config.connect_timeout_s, config.max_connections) == (5, 2, 7)
    assert config.resolved_tokenize_url == "http://t/x" and config.trace == tmp_path / "t.jsonl"
    assert config.rollout_id == "r-1" and config.client_token.get_secret_value() == "t" * 20
    assert config.max_completion_tokens_models == ("my-o*",)


def test_options_are_the_config_fields_and_secrets_stay_off_argv():
    from agentbake.gateway.cli import OPTION_NAMES, SECRET_FIELDS, gateway

    destinations = {param.name for param in gateway.params}
    assert set(GatewayConfig.model_fields) - set(SECRET_FIELDS) <= destinations
    assert "client_token" not in destinations and "api_key" not in destinations
    by_field = {param.name: param for param in gateway.params}
    for field, info in GatewayConfig.model_fields.items():
        if field in SECRET_FIELDS:
            continue
        assert by_field[field].help == " ".join(info.description.split()), field  # the docstring is the help
        if not info.is_required():
            assert by_field[field].default == info.default, field
    assert by_field["read_timeout_s"].opts == [OPTION_NAMES["read_timeout_s"]]
    result = CliRunner().invoke(main, ["gateway", "--upstream", "http://x/v1", "--client-token", "t" * 20])
    assert result.exit_code == 2 and "No such option" in result.output


def test_option_errors_name_the_option(monkeypatch):
    result = CliRunner().invoke(main, ["gateway", "--upstream", "http://x/v1", "--port", "70000"])
    assert result.exit_code == 1 and "--port: Input should be less than or equal to 65535" in result.output
    result = CliRunner().invoke(main, ["gateway", "--upstream", "http://x/v1", "--client-token-env", "UNSET_VAR_X"])
    assert result.exit_code == 1 and "environment variable UNSET_VAR_X is not set" in result.output


def test_a_secret_field_cannot_become_an_option():
    from agentbake.clikit import model_options

    with pytest.raises(TypeError, match=r"GatewayConfig\.client_token is a secret"):
        model_options(GatewayConfig)(lambda **fields: None)
