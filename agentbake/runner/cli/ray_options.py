"""`agentbake rollout`'s Ray options: `--ray ADDRESS`, `--ray-resource` and `--ray-ship-image`.

Each rollout runs as a Ray task on a node with a Docker engine (`cluster/`). These are runtime settings: a `--resume`
may give them, and config.json keeps none.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from agentbake.runner.cluster.ray_config import RayConfig
    from agentbake.runner.cluster.ray_executor import RayExecutor

RAY_OPTIONS = ("ray_address", "ray_resource", "ray_ship_image")
DEFAULT_RESOURCE = "agentbake_docker"  # cluster.ray_config's default (a plain constant: `--help` loads no pydantic)


@dataclass(frozen=True)
class RayChoice:
    """What the Ray options said; `executor()` connects to the cluster (None without `--ray`)."""

    address: str | None
    resource: str
    ship_image: bool

    def check(self, backend: str, warm: int) -> RayConfig | None:
        """The Ray settings, or None without `--ray`.

        Refused with a backend other than Docker, with a warm pool (each node would keep its own), or malformed."""
        if self.address is None:
            return None
        if backend != "docker":
            raise click.UsageError(f"--ray runs rollouts on the nodes' Docker engines: drop --backend {backend}")
        if warm:
            raise click.UsageError("--ray starts each sandbox on its node as the rollout needs it: drop --warm")
        from pydantic import ValidationError

        from agentbake.runner.cluster.ray_config import RayConfig

        try:
            return RayConfig(address=self.address, resource=self.resource, ship_image=self.ship_image)
        except ValidationError as exc:
            problem = exc.errors()[0]
            option = {"address": "--ray", "resource": "--ray-resource"}.get(str(problem["loc"][0]), "--ray")
            raise click.BadParameter(problem["msg"], param_hint=option) from None

    def executor(self, backend: str, warm: int) -> RayExecutor | None:
        """The executor for a job of `backend` (with a warm pool of `warm`), connected; None without `--ray`."""
        config = self.check(backend, warm)
        if config is None:
            return None
        from agentbake.runner.cluster.ray_executor import RayExecutor

        return RayExecutor(config)


def ray_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--ray`, `--ray-resource`, `--ray-ship-image`; the command receives them as `ray: RayChoice`."""

    @functools.wraps(command)
    def wrapper(*args: Any, ray_address: str | None, ray_resource: str, ray_ship_image: bool, **kwargs: Any) -> Any:
        return command(*args, ray=RayChoice(ray_address, ray_resource, ray_ship_image), **kwargs)

    options = [
        click.option(
            "--ray",
            "ray_address",
            metavar="ADDRESS",
            help="Run each rollout as a Ray task on a node of this cluster (HOST:PORT of its head, or auto) that "
            "has a Docker engine (guide: `agentbake docs ray`).",
        ),
        click.option(
            "--ray-resource",
            default=DEFAULT_RESOURCE,
            show_default=True,
            help="The custom resource the nodes with a Docker engine advertise; its amount is their rollouts at once.",
        ),
        click.option(
            "--ray-ship-image",
            is_flag=True,
            help="A node lacking the image loads it from a `docker save` made here, instead of building it.",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
