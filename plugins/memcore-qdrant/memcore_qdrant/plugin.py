"""The memcore plugin: registers the Qdrant stores for their URL schemes, and their benchmark baseline."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from memcore import hookimpl
from memcore.store import BaseStore
from memcore_qdrant.store import QdrantMemoryStore, QdrantServerStore, QdrantStore

if TYPE_CHECKING:
    from memcore_qdrant.raw_baseline import RawQdrantEdge


@hookimpl
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register ``qdrant://``, ``qdrant+memory://`` and ``qdrant+http(s)://``."""
    register(QdrantStore)
    register(QdrantMemoryStore)
    register(QdrantServerStore)


@hookimpl
def memcore_bench_raw_client(url: str) -> RawQdrantEdge | None:
    """Raw qdrant-edge-py on a folder, for the embedded form ``qdrant://PATH`` only."""
    if not url.startswith("qdrant://"):
        return None
    location = url.removeprefix("qdrant://").split("?", 1)[0]
    if not location:
        return None
    from memcore_qdrant.raw_baseline import RawQdrantEdge

    return RawQdrantEdge(Path(os.path.expanduser(location)))
