"""The runner's handle on egress: one event loop thread serving every sandbox's proxy over one shared cache.

service = EgressService(EgressConfig())
proxy = service.start_proxy(host_folder, Policy.build("allowlist", "agent", ["pypi.org"]))
# bind-mount host_folder read-only; in the sandbox: forwarder.py <port> <mount>/egress.sock
env = sandbox_env(port, proxy.policy, service.config)
...                                   # the agent runs, then is killed
proxy.set_policy(Policy.build("public", "verifier"))
notes = [*proxy.refusals(), *proxy.failures()]
proxy.close(); service.close()
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from agentbake.egress.allowlist import Policy
from agentbake.egress.cache import Cache
from agentbake.egress.config import EgressConfig
from agentbake.egress.fill import Shared
from agentbake.egress.ledger import Failure, Refusal
from agentbake.egress.mirrors import Digests, Mirrors
from agentbake.egress.proxy import EgressProxy, ProxyStats
from agentbake.egress.upstream import parse_url, tls_context
from agentbake.errors import ConfigError

T = TypeVar("T")
SOCKET_NAME = "egress.sock"
_CALL_TIMEOUT_S = 30.0


class ProxyHandle:
    """One sandbox's proxy, driven from any thread."""

    def __init__(self, service: EgressService, proxy: EgressProxy) -> None:
        self._service = service
        self._proxy = proxy

    @property
    def socket_path(self) -> Path:
        return self._proxy.socket_path

    @property
    def policy(self) -> Policy:
        return self._proxy.policy

    def set_policy(self, policy: Policy) -> None:
        """Switch phase (do it with the agent dead): later requests follow `policy`, open connections are cut."""
        self._service._call(_sync(self._proxy.set_policy, policy))

    def stats(self) -> ProxyStats:
        """Answers served from the cache, and bytes moved in this phase."""
        return self._service._call(_sync(self._proxy.stats))

    def refusals(self) -> list[Refusal]:
        """Refused requests so far, one per (phase, host), with a count and the first reason."""
        return self._service._call(_sync(self._proxy.refusals))

    def failures(self) -> list[Failure]:
        """Requests to allowed hosts that failed upstream so far, one per (phase, host), with a count and the first
        cause."""
        return self._service._call(_sync(self._proxy.failures))

    def close(self) -> None:
        self._service._call(self._proxy.close())


class EgressService:
    """Runs proxies in a daemon thread's event loop; `close` stops them all."""

    def __init__(self, config: EgressConfig | None = None) -> None:
        self.config = config or EgressConfig()
        if self.config.ca_file is not None and not self.config.ca_file.is_file():
            raise ConfigError(f"egress ca_file: {self.config.ca_file} is not a file (set SSL_CERT_FILE to a CA bundle)")
        self.cache = Cache(self.config.cache_dir, self.config.cache_max_bytes)
        self._shared = Shared(
            self.config, self.cache, Mirrors(self.config, Digests()), tls_context(self.config.ca_file)
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentbake-egress", daemon=True)
        self._thread.start()
        self._proxies: list[EgressProxy] = []

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_CALL_TIMEOUT_S)

    def start_proxy(self, folder: Path, policy: Policy, *, log_path: Path | None = None) -> ProxyHandle:
        """Serve a proxy for one sandbox on `<folder>/egress.sock` (the folder must be this user's). Each refusal and
        upstream failure is also appended to `log_path` as a JSON line."""
        socket_path = folder / SOCKET_NAME
        if len(str(socket_path)) > 100:
            raise ConfigError(f"egress socket path {socket_path} is too long for a unix socket (keep it under 100)")
        proxy = EgressProxy(self._shared, socket_path, policy, log_path=log_path)
        self._call(proxy.start())
        self._proxies.append(proxy)
        return ProxyHandle(self, proxy)

    def close(self) -> None:
        if not self._loop.is_running():
            return

        async def stop() -> None:
            await asyncio.gather(*(proxy.close() for proxy in self._proxies), return_exceptions=True)

        self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_CALL_TIMEOUT_S)
        self._loop.close()


async def _sync(function: Any, *args: Any) -> Any:
    """Run a plain function on the loop's thread (the proxy's state is the loop's alone)."""
    return function(*args)


def sandbox_env(port: int, policy: Policy, config: EgressConfig) -> dict[str, str]:
    """Variables for a sandbox whose relay listens on 127.0.0.1:`port`: the proxy for every client, loopback direct,
    and mirror routes for pip, uv and npm when the policy allows their upstreams."""
    proxy = f"http://127.0.0.1:{port}"
    env = {name: proxy for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")}
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost,::1"
    if all(
        policy.check_host(parse_url(url, schemes=("http", "https")).host) is None
        for url in (config.pypi_index, config.pypi_files)
    ):
        index = f"{proxy}/pypi/simple/"
        env.update(PIP_INDEX_URL=index, UV_DEFAULT_INDEX=index, UV_INDEX_URL=index)
    if policy.check_host(parse_url(config.npm_registry, schemes=("http", "https")).host) is None:
        env["npm_config_registry"] = f"{proxy}/npm/"
    return env
