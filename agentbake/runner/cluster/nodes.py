"""The driver's view of the nodes that run rollouts: alive or not, slots taken, image present.

The driver places each rollout on a node itself, so a rollout lost with its node is known by name.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentbake.runner.cluster.ray_config import NODE_LABEL_PREFIX


class NoNodeError(Exception):
    """No live node advertises the resource."""


@dataclass
class Node:
    """One node that runs rollouts."""

    id: str
    name: str
    slots: int
    running: int = 0
    alive: bool = True
    image: str | None = None
    """How the run's image got onto the node (`present`, `loaded`, `built`); None until prepared."""
    prepare_lock: threading.Lock = field(default_factory=threading.Lock)


def node_name(info: dict[str, Any]) -> str:
    """The node's `node:<label>` resource's label, else `<address>/<first 8 of its id>`."""
    ip = info.get("NodeManagerAddress", "")
    labels = sorted(
        key.removeprefix(NODE_LABEL_PREFIX)
        for key in info.get("Resources", {})
        if key.startswith(NODE_LABEL_PREFIX) and key not in (f"{NODE_LABEL_PREFIX}{ip}", "node:__internal_head__")
    )
    return labels[0] if labels else f"{ip}/{info['NodeID'][:8]}"


class NodeSlots:
    """Free rollout slots over the live nodes: `acquire` a node (waiting for one), `release` it after."""

    def __init__(self, resource: str, refresh_s: float, list_nodes: Any) -> None:
        self.resource = resource
        self._refresh_s = refresh_s
        self._list_nodes = list_nodes  # ray.nodes
        self._nodes: dict[str, Node] = {}
        self._read_at = 0.0
        self._changed = threading.Condition()

    def acquire(self, aborted: threading.Event) -> Node:
        """The live node with the most free slots (taken), waiting while all are busy. NoNodeError when no
        live node advertises the resource."""
        with self._changed:
            while not aborted.is_set():
                if time.monotonic() - self._read_at >= self._refresh_s:
                    self._refresh()
                alive = [node for node in self._nodes.values() if node.alive]
                if not alive:
                    raise NoNodeError(f"no live Ray node advertises the resource {self.resource!r}")
                free = max(alive, key=lambda node: node.slots - node.running)
                if free.running < free.slots:
                    free.running += 1
                    return free
                self._changed.wait(self._refresh_s)
        raise NoNodeError("the batch was aborted")

    def count(self) -> int:
        """The live nodes that advertise the resource, read now."""
        with self._changed:
            self._refresh()
            return sum(node.alive for node in self._nodes.values())

    def release(self, node: Node) -> None:
        with self._changed:
            node.running -= 1
            self._changed.notify()

    def lost(self, node: Node) -> None:
        """`node` died: no rollout goes there again (a node that comes back has another id)."""
        with self._changed:
            node.alive = False
            self._changed.notify_all()

    def _refresh(self) -> None:
        self._read_at = time.monotonic()
        for info in self._list_nodes():
            slots = int(info.get("Resources", {}).get(self.resource, 0))
            node = self._nodes.get(info["NodeID"])
            if node is None and info.get("Alive") and slots > 0:
                self._nodes[info["NodeID"]] = Node(info["NodeID"], node_name(info), slots)
            elif node is not None and not info.get("Alive"):
                node.alive = False
