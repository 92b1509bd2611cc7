"""The raw-chromadb baseline of ``memcore bench``'s adapter overhead (see :mod:`memcore.bench.raw`).

An embedded ``PersistentClient`` with a cosine collection, written with the same
documents and flat metadata the store writes, queried with the same scope
``where`` clauses, its JSON documents parsed on read. What remains between the
two sides is memcore's own work: validation, reading the entries an add replaces,
encoding, decoding into models, filter compilation, the count a delete reports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import chromadb

from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.validation import Matrix
from memcore_chroma.connection import client_settings
from memcore_chroma.encoding import (
    RECORD_ID_KEY,
    Where,
    all_of,
    encode,
    entry_id,
    flat_metadata,
    scope_clauses,
)
from memcore_chroma.opening import configuration
from memcore_chroma.recovery import keep_whole_log


def _parsed(documents: Sequence[str | None] | None) -> list[Any]:
    return [json.loads(d) for d in documents or () if d is not None]


def _scoped(scope: Scope, *extra: Where) -> Where | None:
    return all_of([*scope_clauses(scope), *extra])


def _of_ids(ids: Sequence[UUID]) -> Where:
    return {RECORD_ID_KEY: {"$in": [str(i) for i in ids]}}


class RawChroma:
    """A chromadb collection in ``path``, used the way the store uses it, without memcore
    (with the store URL's ``ef_search``)."""

    def __init__(self, path: Path, ef_search: int | None = None) -> None:
        # Configured as the store configures its folders: Chroma's log kept whole (see recovery).
        chromadb.PersistentClient(path=str(path), settings=client_settings()).close()  # type: ignore[attr-defined]
        keep_whole_log(path)
        self._client = chromadb.PersistentClient(path=str(path), settings=client_settings())
        self._collection = self._client.create_collection(
            "bench", configuration=configuration(ef_search), embedding_function=None
        )

    def prepare(self, records: Sequence[MemoryRecord], vectors: Matrix) -> dict[str, Any]:
        """The ids, vectors, documents and flat metadata the store would write."""
        return {
            "ids": [entry_id(r) for r in records],
            "embeddings": vectors,
            "documents": [encode(r) for r in records],
            "metadatas": [flat_metadata(r, True) for r in records],
        }

    def add(self, prepared: dict[str, Any]) -> None:
        """Upsert the prepared batch."""
        self._collection.upsert(**prepared)

    def search(self, scope: Scope, vector: Matrix, limit: int) -> list[Any]:
        """A scoped vector query, its documents parsed."""
        found = self._collection.query(
            query_embeddings=vector.reshape(1, -1),
            n_results=limit,
            where=_scoped(scope),  # no stand-ins here: the store then leaves ``vec`` out too
            include=["documents", "distances"],
        )
        return _parsed((found["documents"] or [[]])[0])

    def get(self, scope: Scope, ids: Sequence[UUID]) -> list[Any]:
        """A scoped read by record id, its documents parsed."""
        found = self._collection.get(where=_scoped(scope, _of_ids(ids)), include=["documents"])
        return _parsed(found["documents"])

    def delete(self, scope: Scope, ids: Sequence[UUID]) -> None:
        """A scoped delete by record id."""
        self._collection.delete(where=_scoped(scope, _of_ids(ids)))

    def close(self) -> None:
        """Close the client."""
        self._client.close()  # type: ignore[attr-defined]  # on chromadb's Client, not on ClientAPI
