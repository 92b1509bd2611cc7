"""Shared fixtures of the plugin's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memcore.plugin_manager import LOAD_PLUGINS_ENV, reset_plugin_manager


@pytest.fixture
def only_this_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Load memcore's plugins afresh with only memcore-qdrant selected."""
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "memcore-qdrant")
    reset_plugin_manager()
    try:
        yield
    finally:
        monkeypatch.undo()
        reset_plugin_manager()
