"""How the Chroma stores read in order and search: the heuristics Chroma's API calls for.

Chroma cannot order by a field, and its HNSW search can stop short under a selective
``where``. These functions get ordered windows and ranked hits from it anyway, exactly:
each is given a ``where`` that selects a superset of the wanted records (the scope and
the compiled filter) and a predicate or :class:`~memcore_chroma.filters.CompiledFilter`
that settles the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np
from chromadb.api.models.Collection import Collection

from memcore.filters import Filter
from memcore.kit import clamp_score, order_key
from memcore.records import MemoryRecord, ScoredRecord
from memcore.validation import Matrix
from memcore_chroma.encoding import CREATED_AT_KEY, RECORD_ID_KEY, Where, all_of, decode, entry_id
from memcore_chroma.filters import CompiledFilter

MIN_OVERFETCH = 64
"""Candidates fetched at least when a search must post-filter; then 4 times more per round."""

LISTING_SAMPLE = 2
"""An ordered read with a limit first times the ``LISTING_SAMPLE * limit`` records inserted last
(or first) to bound what it reads (see :func:`newest_or_oldest`)."""

T = TypeVar("T")


class CollectionReader(Protocol):
    """What these reads need of a store: calls on its collection, and the records a ``where`` selects."""

    def _call(self, action: str, operation: Callable[[Collection], T]) -> T: ...

    def _candidates(self, where: Where | None, ids: Sequence[str] | None = None) -> list[MemoryRecord]: ...


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def ordered(
    reader: CollectionReader,
    where: Where | None,
    node: Filter | None,
    compiled: CompiledFilter,
    descending: bool,
    limit: int | None,
) -> list[MemoryRecord]:
    """The records ``where`` selects that match ``node`` (compiled into ``compiled``), in
    (created_at, id) order, the first ``limit``."""
    if limit is None:
        records = [r for r in reader._candidates(where) if compiled.admits(node, r)]
        return sorted(records, key=order_key, reverse=descending)
    window = newest_or_oldest(reader, where, limit, descending) if compiled.exact else None
    if window is not None:
        return sorted(window, key=order_key, reverse=descending)[:limit]
    # Order by the small metadata first, then read only the documents needed.
    found = reader._call("listing records", lambda c: c.get(where=where, include=["metadatas"]))
    # (time, record id) as order_key orders records; the entry id only settles two scopes' namesakes.
    keys = sorted(
        (
            (meta[CREATED_AT_KEY], str(meta[RECORD_ID_KEY]), i)
            for i, meta in zip(found["ids"], found["metadatas"] or [], strict=True)
        ),
        reverse=descending,
    )
    entries = [entry for _, _, entry in keys]
    chunk_size = limit if compiled.exact else max(limit * 2, MIN_OVERFETCH)
    result: list[MemoryRecord] = []
    for chunk in chunks(entries, chunk_size):
        # Scoped again: a record deleted (and its id reused elsewhere) since is skipped.
        by_id = {entry_id(r): r for r in reader._candidates(where, chunk)}
        result += [by_id[i] for i in chunk if i in by_id and compiled.admits(node, by_id[i])]
        if len(result) >= limit:
            break
    return result[:limit]


def newest_or_oldest(
    reader: CollectionReader, where: Where | None, limit: int, descending: bool
) -> list[MemoryRecord] | None:
    """Records ``where`` selects, among them its ``limit`` newest (``descending``) or oldest;
    ``None`` if records were deleted meanwhile.

    Sorting means reading the metadata of the whole scope (an agent's whole history, for its
    recent window). Chroma's ids come in insertion order, and reading them alone is cheap: the
    last (or first) ``LISTING_SAMPLE * limit`` inserted give a time bound that at least that many
    records reach, and every record beyond the bound is read, so the answer does not depend on
    that order: records inserted far out of time order (an import of old records last) make the
    read larger, up to every match, as when sorting them all. No more than
    ``LISTING_SAMPLE * limit`` matches are read whole.
    """
    ids = reader._call("listing ids", lambda c: c.get(where=where, include=[]))["ids"]
    size = LISTING_SAMPLE * limit
    if len(ids) <= size:
        return reader._candidates(where)
    sample = ids[-size:] if descending else ids[:size]
    # Read without ``where`` (by id, cheap): only their times are used, as the bound.
    sampled = reader._call("sampling times", lambda c: c.get(ids=sample, include=["metadatas"]))
    times = [int(meta[CREATED_AT_KEY]) for meta in sampled["metadatas"] or []]  # type: ignore[arg-type]
    if not times:
        return None  # all deleted meanwhile
    bound: Where = (
        {CREATED_AT_KEY: {"$gte": min(times)}} if descending else {CREATED_AT_KEY: {"$lte": max(times)}}
    )
    bounded = all_of([where, bound] if where is not None else [bound])
    records = reader._candidates(bounded)
    return records if len(records) >= limit else None


def vector_search(
    reader: CollectionReader,
    where: Where | None,
    query: Matrix,
    wanted: Callable[[MemoryRecord], bool],
    limit: int,
    exact_where: bool,
) -> list[ScoredRecord]:
    """The ``limit`` records nearest ``query`` among those ``where`` selects and ``wanted`` keeps.

    :param exact_where: ``where`` selects only wanted records, so Chroma's first ``limit`` hits
        are the answer; otherwise candidates are over-fetched, then fetched 4 times more per round.
    """
    fetch = limit if exact_where else max(limit * 4, MIN_OVERFETCH)
    while True:
        found = reader._call(
            "searching",
            lambda c, n=fetch: c.query(  # type: ignore[misc]
                query_embeddings=query, n_results=n, where=where, include=["documents", "distances"]
            ),
        )
        ids, documents = found["ids"][0], (found["documents"] or [[]])[0]
        distances = (found["distances"] or [[]])[0]
        hits: list[ScoredRecord] = []
        for record_id, document, distance in zip(ids, documents, distances, strict=True):
            if document is None:
                continue  # deleted by another thread between Chroma's index lookup and its read
            record = decode(record_id, document)
            if wanted(record):
                hits.append(ScoredRecord.of(record, clamp_score(1.0 - distance)))
                if len(hits) == limit:
                    return hits
        if len(ids) < fetch:
            # Fewer than asked: either every candidate was seen, or HNSW gave up
            # early under a selective filter; then rank the candidates exactly.
            total = reader._call("counting candidates", lambda c: len(c.get(where=where, include=[])["ids"]))
            return hits if total <= len(ids) else exact_search(reader, where, query, wanted, limit)
        fetch *= 4


def exact_search(
    reader: CollectionReader,
    where: Where | None,
    query: Matrix,
    wanted: Callable[[MemoryRecord], bool],
    limit: int,
) -> list[ScoredRecord]:
    """Rank every candidate by cosine similarity with numpy (vectors are stored unit-length)."""
    found = reader._call(
        "searching exactly", lambda c: c.get(where=where, include=["embeddings", "documents"])
    )
    if not found["ids"]:
        return []
    vectors = np.asarray(found["embeddings"], dtype=np.float32)
    scores = np.clip(vectors.astype(np.float64) @ query[0].astype(np.float64), -1.0, 1.0)
    hits: list[ScoredRecord] = []
    documents = found["documents"] or []
    for row in np.argsort(-scores, kind="stable"):
        record = decode(found["ids"][row], documents[row])
        if wanted(record):
            hits.append(ScoredRecord.of(record, float(scores[row])))
            if len(hits) == limit:
                break
    return hits
