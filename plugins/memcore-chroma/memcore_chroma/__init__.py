"""memcore-chroma: memcore stores in Chroma, embedded or on a Chroma server.

``chroma:///path`` (embedded, durable), ``chroma+memory://`` (in memory) and
``chroma+http(s)://host:port`` (a server); see :mod:`memcore_chroma.urls`.

The stores are imported on first use, so that ``python -m memcore_chroma.planner`` and
``python -m memcore_chroma.erasure`` run without chromadb (and without runpy's warning about a
module the package had already imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcore.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from memcore_chroma.deployments import ChromaHttpStore as ChromaHttpStore
    from memcore_chroma.deployments import ChromaMemoryStore as ChromaMemoryStore
    from memcore_chroma.deployments import ChromaStore as ChromaStore
    from memcore_chroma.errors import ExclusiveMaintenanceError as ExclusiveMaintenanceError
    from memcore_chroma.store import ChromaStoreBase as ChromaStoreBase

_LAZY_EXPORTS: dict[str, str] = {
    "ChromaHttpStore": "memcore_chroma.deployments",
    "ChromaMemoryStore": "memcore_chroma.deployments",
    "ChromaStore": "memcore_chroma.deployments",
    "ChromaStoreBase": "memcore_chroma.store",
    "ExclusiveMaintenanceError": "memcore_chroma.errors",
}

__all__ = sorted(_LAZY_EXPORTS)

if not TYPE_CHECKING:
    __getattr__ = lazy_getattr("memcore_chroma", _LAZY_EXPORTS, globals())
