"""`--backend docker|e2b|hf` for `agentbake run` and `agentbake rollout`: the options and the backend config.

Docker is the default, with its warm pool (`--warm`). The remote backends start the image published for the content hash
(`--manifest`) and reach the gateway through one relay port (`--relay-listen`, `--relay-url`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
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
    from agentbake.runner.job import JobBackend
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

        try:
            return RelayConfig.listening_at(self.relay_listen, self.relay_url)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--relay-listen") from None

    def config(self) -> BackendConfig:
        kind = BACKENDS[self.name]
        if self.gateway == "sandbox" and not kind.backend.capabilities.gateway_in_sandbox:
            able = " or ".join(name for name, k in BACKENDS.items() if k.backend.capabilities.gateway_in_sandbox)
            raise SandboxError(
                f"--gateway sandbox is for remote backends: {self.name} sandboxes cannot reach the model server "
                f"themselves; use --backend {able}, or --gateway host"
            )
        self._check_warm(self.name)
        if self.name == "docker":
            return kind.config(warm=self.warm)
        return kind.config(manifest=self.manifest, relay=self.relay())

    def job_backend(self) -> JobBackend:
        """The backend a new job records in its config.json."""
        from agentbake.runner.job import JobBackend

        return JobBackend(name=self.name, config=self.config())

    def with_runtime(self, stored: JobBackend, given: Collection[str]) -> JobBackend:
        """`stored` (a job's backend) with the runtime options given: --warm, --relay-listen, --relay-url."""
        update: dict[str, Any] = {}
        if "warm" in given:
            self._check_warm(stored.name)
            update["warm"] = self.warm
        relay = getattr(stored.config, "relay", None)
        if relay is not None and "relay_listen" in given:
            relay = self.relay().model_copy(update={"public_url": relay.public_url})
        if relay is not None and "relay_url" in given:
            relay = relay.model_copy(update={"public_url": self.relay_url})
        if relay is not None:
            update["relay"] = relay
        return stored.model_copy(update={"config": stored.config.model_copy(update=update)})

    def _check_warm(self, name: str) -> None:
        if self.warm and not BACKENDS[name].backend.capabilities.warm_pool:
            raise SandboxError(f"--warm keeps Docker sandboxes started; the {name} backend has no warm pool")


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
            "(remote) sandbox and calls --upstream itself with the key from --api-key-env.",
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
