"""agentbake's folder in the user's cache, where XDG says it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbake.user_cache import user_cache_dir


def test_xdg_cache_home_else_the_home_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_dir() == tmp_path / "agentbake"
    for unset in ("", "relative/cache"):  # a relative XDG_CACHE_HOME is ignored (XDG base directory spec)
        monkeypatch.setenv("XDG_CACHE_HOME", unset)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert user_cache_dir() == tmp_path / "home" / ".cache" / "agentbake"


def test_no_home_no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "not/absolute")
    assert user_cache_dir() is None
