"""The gateway relay (`--gateway host` for remote sandboxes): one TCP port, each rollout's path to its own
gateway socket; unknown rollouts get 404. A real gateway per rollout behind it, the official OpenAI SDK
in front (no Docker needed)."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from agentbake.gateway import GatewayConfig, create_app
from agentbake.runner.remote.relay import GatewayRelay, RelayConfig
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread


def test_each_rollout_reaches_only_its_own_gateway(tmp_path: Path) -> None:
    relay = GatewayRelay(RelayConfig())
    with serve_in_thread(ScriptedModel(tasks=[])) as upstream:
        gateways = {}
        for rollout in ("a-1", "b-2"):
            uds = tmp_path / f"{rollout}.sock"
            config = GatewayConfig(
                upstream=f"{upstream.url}/v1",
                uds=uds,
                rollout_id=rollout,
                client_token=f"token-of-{rollout}-0123456789",
                trace=tmp_path / f"{rollout}.jsonl",
            )
            gateways[rollout] = serve_in_thread(create_app(config), uds=uds)
        try:
            urls = {rollout: relay.register(rollout, str(tmp_path / f"{rollout}.sock")) for rollout in gateways}
            assert urls["a-1"] == f"{relay.url}/r/a-1"
            client = openai.OpenAI(base_url=f"{urls['a-1']}/v1", api_key="token-of-a-1-0123456789", max_retries=0)
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert answer.choices[0].message is not None
            assert (tmp_path / "a-1.jsonl").read_text().count("\n") == 1
            b_trace = tmp_path / "b-2.jsonl"
            assert not b_trace.exists() or b_trace.read_text() == ""
            # b's token at a's path, and a path of no registered rollout: refused
            wrong = openai.OpenAI(base_url=f"{urls['a-1']}/v1", api_key="token-of-b-2-0123456789", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                wrong.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert httpx.get(f"{relay.url}/r/nobody/v1/models").status_code == 404
            relay.unregister("a-1")
            assert httpx.post(f"{urls['a-1']}/v1/chat/completions", json={}).status_code == 404
        finally:
            for served in gateways.values():
                served.stop()
            relay.close()
