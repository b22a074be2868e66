"""The settings of a batch run on a Ray cluster (`agentbake rollout --ray ADDRESS`, `RayExecutor`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_RESOURCE = "agentbake_docker"
NODE_LABEL_PREFIX = "node:"
"""A node's name is its custom resource `node:<label>` (`ray start --resources '{"node:gpu-3": 1}'`) when it has
one, else `<address>/<first 8 of its id>`."""


class RayConfig(BaseModel):
    """Where and how rollouts run on a Ray cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str = Field(min_length=1)
    """The cluster's address, as `ray.init(address=...)` takes it: `HOST:PORT` of the head's GCS (`ray start
    --head --port PORT`), `auto` for the one this machine is part of, or a `ray://` client URL."""
    resource: str = Field(default=DEFAULT_RESOURCE, min_length=1)
    """The custom resource a node with a Docker engine advertises (`ray start --resources '{"agentbake_docker":
    4}'`); its amount is how many rollouts the node runs at once, each rollout takes 1."""
    ship_image: bool = False
    """Ship the run's image through Ray's object store to nodes that lack it; otherwise they build it from their
    catalog."""
    refresh_s: float = Field(default=2.0, gt=0)
    """How often, at most, the list of live nodes is read again while a rollout waits for a free node."""
