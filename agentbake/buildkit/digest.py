"""The content hash that names an image: equal inputs, equal tag; one changed byte, a new tag."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: the runner imports this module, not the templates' jinja2
    from agentbake.buildkit.render import Rendered

HASH_SCHEME = b"agentbake-image-v1"


def length_prefixed(data: bytes) -> bytes:
    """`data` after its length: hashed fields so framed never concatenate to the same bytes for different inputs."""
    return len(data).to_bytes(8, "big") + data


def content_hash(rendered: Rendered, base_image_id: str) -> str:
    """sha256 over the Dockerfile, every context file (sorted paths), the lock and the base image id."""
    digest = hashlib.sha256(length_prefixed(HASH_SCHEME))
    for path, data in sorted(rendered.context_files().items()):
        digest.update(length_prefixed(path.encode()) + length_prefixed(data))
    digest.update(length_prefixed(json.dumps(rendered.lock, sort_keys=True).encode()))
    digest.update(length_prefixed(base_image_id.encode()))
    return digest.hexdigest()


def image_tag(name: str, digest: str) -> str:
    return f"agentbake/{name}:{digest[:12]}"
