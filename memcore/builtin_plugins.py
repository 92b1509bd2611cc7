"""memcore's own stores and embedders, registered through the public hooks.

Built-ins go through exactly the hooks a third-party plugin implements, so the
registry has one code path and ``memcore plugins`` lists them like any other.
Store modules are imported inside the hooks: loading plugins must not import
every backend.
"""

from __future__ import annotations

from collections.abc import Callable

from memcore.embedders.base import Embedder
from memcore.hookspecs import hookimpl
from memcore.store import BaseStore


@hookimpl
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register ``memory://`` and ``jsonl://``."""
    from memcore.stores.in_memory import InMemoryStore
    from memcore.stores.jsonl import JsonlStore

    register(InMemoryStore)
    register(JsonlStore)


@hookimpl
def memcore_register_embedders(register: Callable[[str, Callable[..., Embedder]], None]) -> None:
    """Register the ``hash`` embedder and ``sentence-transformers/all-MiniLM-L6-v2``.

    The second is registered even when the ``st`` extra is not installed:
    importing its module does not import torch or sentence-transformers, and
    opening it without them raises :class:`memcore.errors.UnknownPluginError`
    saying what to install.
    """
    from memcore.embedders.hashing import HashEmbedder
    from memcore.embedders.sentence_transformers import SentenceTransformerEmbedder

    register(HashEmbedder.name, HashEmbedder)
    register(SentenceTransformerEmbedder.name, SentenceTransformerEmbedder)
