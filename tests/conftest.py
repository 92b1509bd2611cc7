"""Shared fixtures; and core tests never autoload installed plugins.

Plugins load lazily, on the first call that needs them, so setting
``MEMCORE_LOAD_PLUGINS`` here, before any test runs, is early enough. It is
only a default: ``MEMCORE_LOAD_PLUGINS=... pytest`` overrides it. Tests that
need real discovery (``tests/test_discovery.py``) set it themselves and reset
the plugin manager.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import ClassVar, Self

import pytest

from memcore.embedders.base import Embedder
from memcore.embedders.hashing import HashEmbedder
from memcore.hookspecs import hookimpl
from memcore.plugin_manager import get_plugin_manager, reset_plugin_manager
from memcore.store import BaseStore
from memcore.stores.in_memory import InMemoryStore

os.environ.setdefault("MEMCORE_LOAD_PLUGINS", "")


class StubStore(InMemoryStore):
    """A store for the made-up ``stub://`` and ``stub+extra://`` schemes."""

    name: ClassVar[str] = "stub"
    schemes: ClassVar[tuple[str, ...]] = ("stub", "stub+extra")

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls()


class StubPlugin:
    """A plugin object, registered in tests the way llm and datasette register theirs."""

    name = "stub-plugin"
    store_class = StubStore

    @hookimpl
    def memcore_register_stores(self, register: Callable[[type[BaseStore]], None]) -> None:
        register(StubStore)

    @hookimpl
    def memcore_register_embedders(self, register: Callable[[str, Callable[..., Embedder]], None]) -> None:
        register("stub-hash", HashEmbedder)


@pytest.fixture
def stub_plugin() -> Iterator[StubPlugin]:
    """A :class:`StubPlugin` registered (as ``stub-plugin``) for the duration of a test."""
    plugin = StubPlugin()
    manager = get_plugin_manager()
    manager.register(plugin, name=plugin.name)
    try:
        yield plugin
    finally:
        manager.unregister(name=plugin.name)


@pytest.fixture
def fresh_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch with which to change the environment before plugins are loaded again.

    Plugins are reloaded on first use within the test, and again (from the
    restored environment) after it.
    """
    reset_plugin_manager()
    try:
        yield monkeypatch
    finally:
        reset_plugin_manager()
