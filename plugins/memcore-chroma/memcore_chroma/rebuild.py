"""Rebuilding a Chroma collection: a copy of its live entries swapped in, and the folder compacted.

Chroma never removes a deleted vector from its HNSW files, nor a deleted record's bytes from its
SQLite file; a copy of the live entries and a compacted, re-indexed folder hold neither.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from memcore_chroma import erasure, recovery
from memcore_chroma.encoding import placeholder_vectors
from memcore_chroma.opening import Meta, configuration, ef_search_of, find

PAGE_SIZE = 1_000
"""Entries per request when copying a collection or writing a large batch."""


def copy_live_entries(
    client: ClientAPI, old: Collection, copy_name: str, meta: Meta, placeholder_dimension: int | None
) -> Collection:
    """A new collection ``copy_name`` (replacing a leftover one) holding every entry of ``old``.

    :param meta: the copy's collection metadata.
    :param placeholder_dimension: rewrite the vectors as stand-ins of this size (all there is
        before the first real vector), instead of copying them.
    """
    if find(client, copy_name) is not None:
        client.delete_collection(copy_name)
    # The copy keeps the collection's ef_search, the one HNSW setting memcore lets users change.
    settings = configuration(ef_search_of(old))
    copy = client.create_collection(copy_name, configuration=settings, metadata=meta, embedding_function=None)
    offset = 0
    while True:
        page = old.get(include=["embeddings", "documents", "metadatas"], limit=PAGE_SIZE, offset=offset)
        if not page["ids"]:
            return copy
        count = len(page["ids"])
        embeddings = (
            np.asarray(page["embeddings"], dtype=np.float32)
            if placeholder_dimension is None
            else placeholder_vectors(count, placeholder_dimension)
        )
        copy.upsert(
            ids=page["ids"], embeddings=embeddings, documents=page["documents"], metadatas=page["metadatas"]
        )
        offset += count


def compact_and_reindex(path: Path) -> None:
    """Compact the folder, then drop its vector index files for Chroma to rebuild from the log.

    chromadb writes its index files from buffers that can hold bytes of deleted records (a deleted
    record's content and id inside ``data_level0.bin`` after a purge); rebuilt from the purged log,
    they cannot.
    """
    erasure.compact_persist_directory(path)
    if (path / recovery.LOG_COMPLETE).exists():
        recovery.reset_vector_indexes(path)
