"""A memcore plugin that registers the ``example://`` store."""

from __future__ import annotations

from collections.abc import Callable

from memcore import hookimpl
from memcore.store import BaseStore
from memcore_example_store.store import ExampleStore

__all__ = ["ExampleStore", "memcore_register_stores"]


@hookimpl
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register :class:`ExampleStore` for ``example://`` URLs."""
    register(ExampleStore)
