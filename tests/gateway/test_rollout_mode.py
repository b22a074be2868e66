"""Per-rollout mode: one gateway per rollout, on a unix socket, tagging every record with its rollout and
admitting only requests that carry the rollout's token. Official SDKs over httpx's unix-socket transport."""

from __future__ import annotations

import secrets

import anthropic
import httpx
import openai
import pytest
from pydantic import ValidationError

from agentbake.gateway import GatewayConfig
from agentbake.scripted import Reply

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def token() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture
def rollout_gateway(make_gateway, tmp_path, token):
    """A gateway serving rollout "r-7" only, on a unix socket, behind `token`."""
    return make_gateway(rollout_id="r-7", client_token=token, uds=tmp_path / "gw.sock")


def claude(gw, api_key: str, path: str = "") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url + path, api_key=api_key, max_retries=0, http_client=gw.http_client())


def oai(gw, api_key: str, path: str = "") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + path + "/v1", api_key=api_key, max_retries=0, http_client=gw.http_client())


def test_every_record_gets_the_rollout_whatever_the_path(rollout_gateway, upstream, token):
    upstream.fake.script = [Reply(text="one"), Reply(text="two"), Reply(text="three")]
    assert (
        claude(rollout_gateway, token).messages.create(model="c", max_tokens=9, messages=USER).content[0].text == "one"
    )
    answer = oai(rollout_gateway, token, "/r/r-7").chat.completions.create(model="m", messages=USER)
    assert answer.choices[0].message.content == "two"
    with claude(rollout_gateway, token, "/r/r-7").messages.stream(model="c", max_tokens=9, messages=USER) as stream:
        assert stream.get_final_text() == "three"
    records = rollout_gateway.records()
    assert [(r.rollout_id, r.dialect, r.turn) for r in records] == [
        ("r-7", "anthropic", 0),
        ("r-7", "openai", 1),
        ("r-7", "anthropic", 2),
    ]
    assert [r.completion_token_ids for r in records] == upstream.fake.emitted


def test_another_rollouts_path_is_refused_and_writes_nothing(rollout_gateway, upstream, token):
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        claude(rollout_gateway, token, "/r/r-8").messages.create(model="c", max_tokens=9, messages=USER)
    assert refused.value.status_code == 403
    assert "serves rollout 'r-7' only; the path names rollout 'r-8'" in refused.value.message
    with pytest.raises(openai.PermissionDeniedError, match="names rollout 'r-8'"):
        oai(rollout_gateway, token, "/r/r-8").chat.completions.create(model="m", messages=USER)
    assert upstream.fake.requests == [] and rollout_gateway.records() == []


def test_requests_without_the_token_get_401_in_their_dialect(rollout_gateway, upstream, token):
    with pytest.raises(anthropic.AuthenticationError) as denied:
        claude(rollout_gateway, "sk-the-upstream-key-is-not-it").messages.create(model="c", max_tokens=9, messages=USER)
    assert denied.value.body["error"]["type"] == "authentication_error" and "gateway token" in denied.value.message
    with pytest.raises(openai.AuthenticationError, match="gateway token"):
        oai(rollout_gateway, token[:-1]).chat.completions.create(model="m", messages=USER)
    with rollout_gateway.http_client() as client:  # no token at all
        bare = client.post("http://localhost/v1/chat/completions", json={"model": "m", "messages": USER})
        assert bare.status_code == 401 and bare.json()["error"]["type"] == "authentication_error"
        # A health probe needs no token: it reveals nothing and reaches no upstream.
        assert client.get("http://localhost/healthz").status_code == 200
    assert upstream.fake.requests == [] and rollout_gateway.records() == []


def test_the_token_stays_in_the_gateway(rollout_gateway, upstream, token):
    upstream.fake.script = [Reply(text="ok")]
    oai(rollout_gateway, token).chat.completions.create(model="m", messages=USER)
    assert all(token not in value for headers in upstream.fake.headers for value in headers.values())
    assert token.encode() not in rollout_gateway.trace.read_bytes()
    assert token not in repr(rollout_gateway.config) and token not in str(rollout_gateway.config.model_dump())


def test_an_open_gateway_still_serves_every_rollout(gateway, upstream):
    upstream.fake.script = [Reply(), Reply()]
    for rollout in ("a", "b"):
        httpx.post(gateway.url + f"/r/{rollout}/v1/chat/completions", json={"model": "m", "messages": USER})
    assert [r.rollout_id for r in gateway.records()] == ["a", "b"]


def test_rollout_settings_are_checked():
    with pytest.raises(ValidationError, match="invalid rollout id 'a/b'"):
        GatewayConfig(upstream="http://x/v1", rollout_id="a/b")
    with pytest.raises(ValidationError, match="client_token must be at least 16 characters"):
        GatewayConfig(upstream="http://x/v1", client_token="short")


def test_the_trainer_moves_the_policy_version_with_its_admin_token_and_the_agent_cannot(
    make_gateway, upstream, tmp_path, token, monkeypatch
):
    monkeypatch.setenv("AGENTBAKE_TEST_ADMIN", "admin-" + token[:8])
    gw = make_gateway(
        rollout_id="r-7",
        client_token=token,
        uds=tmp_path / "gw.sock",
        worker="http://w1:8000/v1",
        policy_version=3,
        admin_token_env="AGENTBAKE_TEST_ADMIN",
    )
    upstream.fake.script = [Reply(text="one"), Reply(text="two")]
    oai(gw, token).chat.completions.create(model="m", messages=USER)
    with gw.http_client() as client:
        for wrong in (token, "admin-nope"):  # the agent's token never moves it
            refused = client.put(
                "http://localhost/policy_version",
                json={"policy_version": 99},
                headers={"authorization": f"Bearer {wrong}"},
            )
            assert refused.status_code == 401 and "admin token" in refused.json()["error"]["message"]
        admin = {"authorization": "Bearer admin-" + token[:8]}
        bad = client.put("http://localhost/policy_version", json={"policy_version": "4"}, headers=admin)
        assert bad.status_code == 400 and "expected" in bad.text
        moved = client.put("http://localhost/policy_version", json={"policy_version": 4}, headers=admin)
        assert moved.status_code == 200 and moved.json() == {"policy_version": 4}
    oai(gw, token).chat.completions.create(model="m", messages=USER)
    assert [(r.worker, r.policy_version) for r in gw.records()] == [("http://w1:8000/v1", 3), ("http://w1:8000/v1", 4)]


def test_an_admin_token_variable_that_is_not_set_is_refused(tmp_path):
    from agentbake.errors import ConfigError
    from agentbake.gateway import create_app

    config = GatewayConfig(upstream="http://127.0.0.1:9/v1", admin_token_env="AGENTBAKE_TEST_UNSET_ADMIN")
    with pytest.raises(
        ConfigError, match="admin_token_env: environment variable AGENTBAKE_TEST_UNSET_ADMIN is not set"
    ):
        create_app(config)
