"""Fixtures: the scripted model served on loopback (plain, or in a tiny real tokenizer's vocabulary), and
Harbor-layout tasks written on the fly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from agentbake.scripted import ScriptedModel
from agentbake.serve import ServedApp, serve_in_thread
from tests.tiny_tokenizer import build_tokenizer


@dataclass
class Served:
    model: ScriptedModel
    url: str

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="session")
def _scripted_server() -> Iterator[tuple[ScriptedModel, ServedApp]]:
    model = ScriptedModel()
    with serve_in_thread(model, log_level="critical") as served:
        yield model, served


@pytest.fixture
def scripted(_scripted_server: tuple[ScriptedModel, ServedApp]) -> Served:
    """The shared scripted model with its script, responder and logs reset for this test."""
    model, served = _scripted_server
    model.__dict__.update(ScriptedModel().__dict__)
    return Served(model, served.url)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real tokenizer folder (`tests/tiny_tokenizer.py`), one per test module."""
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture
def served(tokenizer_dir: Path) -> Iterator[tuple[ScriptedModel, openai.OpenAI]]:
    """A scripted model in `tokenizer_dir`'s vocabulary, served for this test, and an OpenAI client of it."""
    model = ScriptedModel(tokenizer=tokenizer_dir)
    with serve_in_thread(model, log_level="critical") as app:
        yield model, openai.OpenAI(base_url=app.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture
def make_task(tmp_path: Path) -> Callable[..., Path]:
    """Write a task directory: make_task(name, instruction, solve_sh) -> its path."""

    def make(name: str, instruction: str, solve: str | None) -> Path:
        root = tmp_path / "tasks" / name
        (root / "tests").mkdir(parents=True)
        (root / "instruction.md").write_text(instruction)
        (root / "tests" / "test.sh").write_text("#!/bin/bash\nexit 0\n")
        if solve is not None:
            (root / "solution").mkdir()
            (root / "solution" / "solve.sh").write_text(solve)
        return root

    return make
