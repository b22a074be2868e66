"""`--backend docker|e2b|hf` for `agentbake run` and `agentbake rollout`: the options and the backend config
they make (the Runner builds the backend from it, through `backend_registry.make_backend`).

Docker is the default (with its warm pool, `--warm`). The remote backends start the image published for the
local image's content hash (the published manifest, `--manifest`), and reach the rollout's gateway on this
machine through one relay port (`--relay-listen`, `--relay-url`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agentbake.errors import SandboxError
from agentbake.runner.backend_registry import BACKENDS, DEFAULT_BACKEND
from agentbake.runner.choices import DEFAULT_GATEWAY, GATEWAY_PLACES

# The backends' pydantic configs are imported when the command runs (`config()`): `run --help` does without them.
if TYPE_CHECKING:
    from agentbake.runner.backend_registry import BackendConfig
    from agentbake.runner.remote.relay_config import RelayConfig


@dataclass(frozen=True)
class BackendChoice:
    """What the backend options said; `config()` is the backend's config, which the Runner builds it from."""

    name: str = DEFAULT_BACKEND
    gateway: str = DEFAULT_GATEWAY
    manifest: Path | None = None
    relay_listen: str = "127.0.0.1:0"
    relay_url: str | None = None
    warm: int = 0  # `rollout --warm`: DockerConfig.warm, the Docker backend's warm pool

    def relay(self) -> RelayConfig:
        from agentbake.runner.remote.relay_config import RelayConfig

        host, sep, port = self.relay_listen.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise click.BadParameter(
                f"{self.relay_listen!r}: expected HOST:PORT, e.g. 0.0.0.0:8900", param_hint="--relay-listen"
            )
        return RelayConfig(listen_host=host.strip("[]"), listen_port=int(port), public_url=self.relay_url)

    def config(self) -> BackendConfig:
        kind = BACKENDS[self.name]
        if self.gateway == "sandbox" and not kind.backend.capabilities.gateway_in_sandbox:
            able = " or ".join(name for name, k in BACKENDS.items() if k.backend.capabilities.gateway_in_sandbox)
            raise SandboxError(
                f"--gateway sandbox is for remote backends: {self.name} sandboxes cannot reach the model server "
                f"themselves; use --backend {able}, or --gateway host"
            )
        if self.warm and not kind.backend.capabilities.warm_pool:
            raise SandboxError(f"--warm keeps Docker sandboxes started; the {self.name} backend has no warm pool")
        if self.name == "docker":
            return kind.config(warm=self.warm)
        return kind.config(manifest=self.manifest, relay=self.relay())


def backend_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--backend`, `--gateway`, `--manifest`, `--relay-listen`, `--relay-url`; the command receives them
    as `backend: BackendChoice`."""

    @functools.wraps(command)
    def wrapper(
        *args: Any,
        backend: str,
        gateway: str,
        manifest: Path | None,
        relay_listen: str,
        relay_url: str | None,
        **kwargs: Any,
    ) -> Any:
        choice = BackendChoice(backend, gateway, manifest, relay_listen, relay_url)
        return command(*args, backend=choice, **kwargs)

    options = [
        click.option(
            "--backend",
            type=click.Choice(list(BACKENDS)),
            default=DEFAULT_BACKEND,
            show_default=True,
            help="Where sandboxes run: the local Docker engine, E2B, or Hugging Face (guide: `agentbake docs remote`).",
        ),
        click.option(
            "--gateway",
            type=click.Choice(GATEWAY_PLACES),
            default=DEFAULT_GATEWAY,
            show_default=True,
            help="host: the gateway runs here, the sandbox holds a per-rollout token; sandbox: it runs in the "
            "(remote) sandbox and calls --model itself with the key from --api-key-env.",
        ),
        click.option(
            "--manifest",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Published manifest naming the remote image per content hash (default $AGENTBAKE_PUBLISHED, "
            "else ./published.json).",
        ),
        click.option(
            "--relay-listen",
            default="127.0.0.1:0",
            show_default=True,
            help="Remote backends: HOST:PORT where the gateway relay listens for the sandboxes.",
        ),
        click.option("--relay-url", help="Remote backends: the URL sandboxes reach the relay at (e.g. a tunnel's)."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
