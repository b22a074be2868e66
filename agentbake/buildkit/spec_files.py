"""An image folder's files as plain data: `image.toml` merged along `extends`, and `lock.json`.

No pydantic, so a catalog name resolves to its remembered tag without the spec models.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from agentbake.errors import SpecError

SPEC_FILE = "image.toml"
LOCK_FILE = "lock.json"


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file; an image folder needs an {SPEC_FILE}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}; fix the syntax at that line") from None


def merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Child over parent: tables merge, lists append (without repeats), scalars override."""
    merged = dict(parent)
    for key, value in child.items():
        old = merged.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            merged[key] = merge(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            merged[key] = old + [v for v in value if v not in old]
        else:
            merged[key] = value
    return merged
