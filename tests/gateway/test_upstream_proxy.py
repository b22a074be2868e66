"""The gateway's upstream client through HTTP_PROXY/HTTPS_PROXY (a real forward proxy on loopback), and NO_PROXY."""

from __future__ import annotations

import asyncio
import base64

import openai
import pytest

from agentbake.gateway.errors import UpstreamError
from agentbake.gateway.upstream import Proxy, UpstreamClient, environment_proxies, proxy_for

from .forward_proxy import ForwardProxy

USER = [{"role": "user", "content": "hi"}]
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _environment(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """Exactly these proxy variables (lower case, which urllib reads over upper case), none of the machine's."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def _ask(gw) -> str:
    # The test's own client dials the gateway directly: a transport of its own ignores the proxy variables.
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=gw.http_client())
    return client.chat.completions.create(model="m", messages=USER).choices[0].message.content or ""


def test_an_http_upstream_is_called_through_http_proxy_unless_no_proxy_lists_it(make_gateway, upstream, monkeypatch):
    port = upstream.url.rsplit(":", 1)[1]
    with ForwardProxy() as proxy:
        _environment(monkeypatch, http_proxy=proxy.url)
        assert _ask(make_gateway())
        assert proxy.heads and proxy.heads[0].startswith(f"POST http://127.0.0.1:{port}/v1/chat/completions ".encode())
        assert len(upstream.fake.requests) == 1

        _environment(monkeypatch, http_proxy=proxy.url, no_proxy="localhost,127.0.0.1")
        assert _ask(make_gateway())
        assert len(proxy.heads) == 1 and len(upstream.fake.requests) == 2  # straight to the upstream


def test_an_https_upstream_is_reached_through_a_connect_tunnel(make_gateway, tls_upstream, tls_files, monkeypatch):
    model, url = tls_upstream
    with ForwardProxy() as proxy:
        _environment(monkeypatch, https_proxy=proxy.url, http_proxy="http://127.0.0.1:9")  # http_proxy: unused
        gw = make_gateway(upstream=url, upstream_ca_file=tls_files.ca)
        assert _ask(gw) and _ask(gw)
    authority = url.removeprefix("https://").removesuffix("/v1")
    assert proxy.heads == [f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n\r\n".encode()]  # one, kept alive
    assert len(model.requests) == 2 and [r.completion_token_ids for r in gw.records()] == model.emitted


def test_a_refused_tunnel_is_529_naming_the_proxy_and_credentials_reach_it(make_gateway, tls_upstream, monkeypatch):
    _, url = tls_upstream
    with ForwardProxy(refuse_connect="407 Proxy Authentication Required") as proxy:
        _environment(monkeypatch, https_proxy=f"http://user:pa%20ss@127.0.0.1:{proxy.port}")
        with pytest.raises(openai.APIStatusError) as caught:
            _ask(make_gateway(upstream=url))
    assert caught.value.status_code == 529
    assert f"through proxy 127.0.0.1:{proxy.port}" in str(caught.value) and "407" in str(caught.value)
    assert b"proxy-authorization: Basic " + base64.b64encode(b"user:pa ss") in proxy.heads[0]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("api.example.com", Proxy("proxy.corp", 3128)),
        ("example.org", None),
        ("a.internal", None),
        ("10.1.2.3", None),
    ],
)
def test_no_proxy_is_read_as_urllib_reads_it(host: str, expected: Proxy | None) -> None:
    proxies = {"https": "proxy.corp:3128", "no": "example.org, .internal,10.1.2.3"}
    assert proxy_for("https", host, 443, proxies) == expected
    assert proxy_for("http", host, 80, proxies) is None  # no http proxy named


def test_the_environment_is_read_as_urllib_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _environment(monkeypatch)
    assert environment_proxies() == {}
    _environment(monkeypatch, HTTPS_PROXY="http://p:3128", no_proxy="example.org")
    assert environment_proxies() == {"https": "http://p:3128", "no": "example.org"}


def test_a_proxy_that_is_not_plain_http_is_a_clear_error() -> None:
    async def scenario() -> None:
        client = UpstreamClient(
            "http://127.0.0.1:9/v1", headers={}, connect_timeout=1, read_timeout=1, max_connections=1
        )
        client._proxies = {"http": "socks5://127.0.0.1:1080"}
        await client.request("GET", "/models")

    with pytest.raises(UpstreamError, match=r"http_proxy 'socks5://127.0.0.1:1080': only http://HOST:PORT proxies"):
        asyncio.run(scenario())
