"""Context managers that serve a fake control plane on loopback and point the real SDK at it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentbake.serve import serve_in_thread
from tests.runner.fakes.containers import LocalMachines
from tests.runner.fakes.e2b_fake import FakeE2B
from tests.runner.fakes.hf_fake import FakeHub


@contextmanager
def fake_e2b(
    monkeypatch: pytest.MonkeyPatch, machines: LocalMachines, templates: dict[str, tuple[str, str]]
) -> Iterator[FakeE2B]:
    """FakeE2B on a free loopback port, with E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY naming it."""
    fake = FakeE2B(machines, templates)
    with serve_in_thread(fake) as served:
        for name, value in fake.env(served.url).items():
            monkeypatch.setenv(name, value)
        yield fake


@contextmanager
def fake_hub(monkeypatch: pytest.MonkeyPatch, machines: LocalMachines) -> Iterator[FakeHub]:
    """FakeHub on a free loopback port. huggingface_hub reads HF_ENDPOINT once, at import, into
    `constants.ENDPOINT`: that constant is what is pointed at the fake (with HF_ENDPOINT for children)."""
    import huggingface_hub.constants

    fake = FakeHub(machines)
    with serve_in_thread(fake) as served:
        fake.url = served.url
        monkeypatch.setenv("HF_ENDPOINT", served.url)
        monkeypatch.setenv("HF_TOKEN", "hf_fake_token_for_tests")
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", served.url)
        yield fake
