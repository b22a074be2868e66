"""RunnerConfig's checks and the served model's name, without a sandbox."""

from __future__ import annotations

import os
import re
import socket
import tempfile
import time

import pytest
from pydantic import ValidationError

from agentbake.errors import ConfigError
from agentbake.runner.model.host_gateway import GATEWAY_DIR_PREFIX, GATEWAY_SOCKET, remove_stale_gateways, served_model
from agentbake.runner.rollout import new_rollout_id
from agentbake.runner.runner_config import RunnerConfig
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread
from agentbake.tasks import load_task
from tests.runner.rollouts import EXAMPLES


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "no model: pass model='scripted' or an OpenAI-compatible URL"),
        ({"model": "scripted", "oracle": True}, "oracle runs the reference solution with no model"),
        ({"model": "localhost:8000/v1"}, "expected 'scripted' or an http(s):// URL ending in /v1"),
        ({"model": "scripted", "memory_mb": 8}, "greater than or equal to 16"),
        ({"model": "scripted", "allowed_hosts": ("pypi.org",)}, "allowed_hosts is for an allowlist override"),
        (
            {"model": "scripted", "agent_network": "allowlist", "allowed_hosts": ("https://pypi.org/simple",)},
            "allowed_hosts: 'https://pypi.org/simple': a URL; write the host name only, e.g. 'pypi.org'",
        ),
        ({"model": "scripted", "verifier_network": "internet"}, "Input should be 'none', 'allowlist', 'public'"),
        ({"oracle": True, "agent_user": "bad name"}, "'bad name': expected a user name or a uid of the task image's"),
        ({"oracle": True, "agent_user": "-x"}, "'-x': expected a user name or a uid"),
        (
            {"model": "http://m/v1", "gateway": "sandbox", "model_settings": {"tokenizer": "/models/qwen"}},
            "model_settings.tokenizer: token-in needs the gateway on this host",
        ),
        (
            {"model": "http://m/v1", "gateway": "sandbox", "model_settings": {"token_in": True}},
            "use gateway='host' (--gateway host), or drop --token-in",
        ),
    ],
)
def test_bad_settings_say_what_to_pass(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        RunnerConfig(image="agentbake/claude-code:0", **fields)


def test_agent_user_takes_a_name_or_a_uid() -> None:
    assert RunnerConfig(image="x:1", oracle=True, agent_user="www-data").agent_user == "www-data"
    assert RunnerConfig(image="x:1", oracle=True, agent_user="0").agent_user == "0"
    assert RunnerConfig(image="x:1", oracle=True).agent_user is None


def test_the_upstream_url_drops_its_trailing_slash() -> None:
    config = RunnerConfig(image="x:1", model="http://127.0.0.1:8000/v1/")
    assert config.upstream_urls == ("http://127.0.0.1:8000/v1",)
    assert RunnerConfig(image="x:1", model="scripted").upstream_urls == ()


def test_several_model_workers_are_a_tuple_and_one_is_a_string() -> None:
    two = RunnerConfig(image="x:1", model=["http://a:1/v1", "http://b:2/v1/", "http://a:1/v1"])
    assert two.model == ("http://a:1/v1", "http://b:2/v1/")
    assert two.upstream_urls == ("http://a:1/v1", "http://b:2/v1")
    assert RunnerConfig.model_validate_json(two.model_dump_json()) == two  # a job's config.json reads back
    assert RunnerConfig(image="x:1", model=["http://a:1/v1"]).model == "http://a:1/v1"
    with pytest.raises(ValidationError, match="several models must all be http"):
        RunnerConfig(image="x:1", model=["scripted", "http://a:1/v1"])
    with pytest.raises(ValidationError, match="'ftp://a/v1': expected 'scripted' or an http"):
        RunnerConfig(image="x:1", model=["http://a:1/v1", "ftp://a/v1"])
    with pytest.raises(ValidationError, match="an empty list"):
        RunnerConfig(image="x:1", model=[])


def test_without_a_model_name_the_served_model_is_asked_with_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBAKE_TEST_SERVED_KEY", "k-123")
    model = ScriptedModel(model_name="served-model-7")
    with serve_in_thread(model) as upstream:
        assert served_model(f"{upstream.url}/v1", "AGENTBAKE_TEST_SERVED_KEY") == "served-model-7"
    assert model.headers[-1]["authorization"] == "Bearer k-123"


def test_an_unreachable_upstream_names_the_url_and_the_fix() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ConfigError, match=rf"could not read the served model's name from {url}/models .*pass --model "):
        served_model(url, "AGENTBAKE_TEST_UNSET_KEY")


def test_rollout_ids_are_readable_unique_and_safe_as_labels(tmp_path) -> None:
    task = load_task(EXAMPLES / "write-file")
    ids = {new_rollout_id(task) for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("write-file-") and len(i) == len("write-file-") + 8 for i in ids)


def test_gateway_folders_left_by_a_killed_runner_are_removed_live_ones_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, live, young = (tmp_path / f"{GATEWAY_DIR_PREFIX}{name}" for name in ("dead", "live", "young"))
    for folder in (dead, live, young):
        folder.mkdir()
    for folder in (dead, young):  # a socket file nobody listens on, as after kill -9
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(folder / GATEWAY_SOCKET))
    with serve_in_thread(ScriptedModel(), uds=live / GATEWAY_SOCKET):
        old = time.time() - 3600
        for folder in (dead, live):
            os.utime(folder, (old, old))
        assert remove_stale_gateways() == [dead]
    assert not dead.exists() and live.exists() and young.exists()


def test_egress_folders_left_by_a_killed_runner_are_removed_live_ones_kept(tmp_path, monkeypatch) -> None:
    from agentbake.egress import EgressConfig, EgressService, Policy
    from agentbake.egress.service import SOCKET_NAME
    from agentbake.runner.network import EGRESS_DIR_PREFIX

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, live = (tmp_path / f"{EGRESS_DIR_PREFIX}{name}" for name in ("dead", "live"))
    for folder in (dead, live):
        folder.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(dead / SOCKET_NAME))
    service = EgressService(EgressConfig(cache_dir=tmp_path / "cache", ca_file=None))
    try:
        service.start_proxy(live, Policy.build("no-network", "agent"))
        old = time.time() - 3600
        for folder in (dead, live):
            os.utime(folder, (old, old))
        assert remove_stale_gateways(EGRESS_DIR_PREFIX, SOCKET_NAME) == [dead]
    finally:
        service.close()
    assert live.exists()
