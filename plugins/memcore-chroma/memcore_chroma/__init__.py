"""memcore-chroma: memcore stores in Chroma, embedded or on a Chroma server.

``chroma:///path`` (embedded, durable), ``chroma+memory://`` (in memory) and
``chroma+http(s)://host:port`` (a server); see :mod:`memcore_chroma.urls`.
"""

from memcore_chroma.deployments import ChromaHttpStore, ChromaMemoryStore, ChromaStore
from memcore_chroma.errors import ExclusiveMaintenanceError
from memcore_chroma.store import ChromaStoreBase

__all__ = [
    "ChromaHttpStore",
    "ChromaMemoryStore",
    "ChromaStore",
    "ChromaStoreBase",
    "ExclusiveMaintenanceError",
]
