"""Package namespaces whose public names are imported on first use (PEP 562).

Eager re-exports would import every SDK before `agentbake run --help` prints a line. A package lists its names:

    __getattr__, __dir__ = lazy_exports(__name__, {"Runner": "agentbake.runner.runner", ...})

and `from agentbake.runner import Runner` imports `agentbake.runner.runner` then, once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, importing each name in `exports` on first access."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next access is a plain attribute lookup
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
