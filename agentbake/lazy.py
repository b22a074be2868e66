"""Package namespaces whose public names are imported on first use (PEP 562).

`import agentbake.runner.cli.commands` runs `agentbake/runner/__init__.py` first; with eager re-exports that imports
every backend's SDK, the gateway's web stack and pydantic's schema machinery before `agentbake run --help`
can print a line. A package lists its names instead:

    __getattr__, __dir__ = lazy_exports(__name__, {"Runner": "agentbake.runner.runner", ...})

and `from agentbake.runner import Runner` imports `agentbake.runner.runner` then, once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose names in `exports` (name -> module defining it)
    are imported on first access and then kept in the package's namespace."""

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
