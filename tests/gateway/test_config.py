"""Settings validation and where the upstream key comes from."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentbake.errors import ConfigError
from agentbake.gateway.config import GatewayConfig


def test_every_field_is_documented():
    import ast
    import inspect

    from agentbake.gateway import config as module

    tree = ast.parse(inspect.getsource(module))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GatewayConfig"]
    body = cls.body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign):
            following = body[i + 1]
            assert isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant), node.target.id


def test_upstream_url_and_tokenize_url():
    config = GatewayConfig(upstream="http://127.0.0.1:8000/v1/")
    assert config.upstream == "http://127.0.0.1:8000/v1"
    assert config.resolved_tokenize_url == "http://127.0.0.1:8000/tokenize"
    with pytest.raises(ValidationError, match="http"):
        GatewayConfig(upstream="127.0.0.1:8000")
    with pytest.raises(ValidationError):
        GatewayConfig(upstream="http://x/v1", unknown_setting=1)


def test_zero_cap_means_no_cap_and_log_levels_are_checked():
    assert GatewayConfig(upstream="http://x/v1", max_tokens_cap=0).max_tokens_cap is None
    with pytest.raises(ValidationError, match="max_tokens_cap"):
        GatewayConfig(upstream="http://x/v1", max_tokens_cap=-5)
    with pytest.raises(ValidationError, match="log_level"):
        GatewayConfig(upstream="http://x/v1", log_level="loud")


def test_key_from_env_or_file(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTBAKE_UPSTREAM_API_KEY", raising=False)
    assert GatewayConfig(upstream="http://x/v1").read_api_key() is None
    monkeypatch.setenv("MY_KEY", "from-env")
    assert GatewayConfig(upstream="http://x/v1", api_key_env="MY_KEY").read_api_key() == "from-env"
    key = tmp_path / "key"
    key.write_text("  from-file\n")
    assert GatewayConfig(upstream="http://x/v1", api_key_env="MY_KEY", api_key_file=key).read_api_key() == "from-file"
    key.write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        GatewayConfig(upstream="http://x/v1", api_key_file=key).read_api_key()
    with pytest.raises(ConfigError, match="cannot read"):
        GatewayConfig(upstream="http://x/v1", api_key_file=tmp_path / "missing").read_api_key()
