"""Every exception in agentbake/errors.py is part of the package's public API."""

from __future__ import annotations

import inspect

import agentbake
from agentbake import errors


def test_the_package_reexports_every_error_class() -> None:
    defined = {name for name, value in inspect.getmembers(errors, inspect.isclass) if issubclass(value, Exception)}
    assert "AgentbakeError" in defined
    assert defined <= set(agentbake.__all__)
    for name in defined:
        assert getattr(agentbake, name) is getattr(errors, name)
        assert issubclass(getattr(errors, name), errors.AgentbakeError)
