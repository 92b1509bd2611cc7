"""The memcore plugin: registers the Qdrant stores for their URL schemes."""

from __future__ import annotations

from collections.abc import Callable

from memcore import hookimpl
from memcore.store import BaseStore
from memcore_qdrant.store import QdrantMemoryStore, QdrantServerStore, QdrantStore


@hookimpl
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register ``qdrant://``, ``qdrant+memory://`` and ``qdrant+http(s)://``."""
    register(QdrantStore)
    register(QdrantMemoryStore)
    register(QdrantServerStore)
