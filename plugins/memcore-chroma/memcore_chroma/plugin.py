"""The memcore plugin entry point: registers the Chroma stores."""

from __future__ import annotations

from collections.abc import Callable

from memcore import hookimpl
from memcore.store import BaseStore
from memcore_chroma.store import ChromaHttpStore, ChromaMemoryStore, ChromaStore


@hookimpl
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register ``chroma://``, ``chroma+memory://`` and ``chroma+http(s)://``."""
    register(ChromaStore)
    register(ChromaMemoryStore)
    register(ChromaHttpStore)
