"""agentbake's folder in the user's cache: `$XDG_CACHE_HOME/agentbake`, else `~/.cache/agentbake`. What lives
there may be deleted at any time; it is worked out again (the build kit's remembered tags, buildkit/tag_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path | None:
    """The folder (not created here), or None when this user has no home to hold it. A relative XDG_CACHE_HOME
    is ignored, as the XDG base directory specification says."""
    configured = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(configured) if os.path.isabs(configured) else Path(os.path.expanduser("~")) / ".cache"
    return root / "agentbake" if root.is_absolute() else None
