"""memcore-qdrant: memcore stores on Qdrant, embedded (Qdrant Edge) or on a server (qdrant-client)."""

from memcore.errors import StoreFullError
from memcore_qdrant.errors import IncompatibleCollectionError, IncompatibleServerError
from memcore_qdrant.store import QdrantMemoryStore, QdrantServerStore, QdrantStore

__all__ = [
    "IncompatibleCollectionError",
    "IncompatibleServerError",
    "QdrantMemoryStore",
    "QdrantServerStore",
    "QdrantStore",
    "StoreFullError",
]
