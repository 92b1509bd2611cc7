"""How the Chroma stores read in order and search: the heuristics Chroma's API calls for.

Each read is a session of calls on the collection (:mod:`memcore_chroma.calls`), run through the
sync client or, on a server, the async one.

Chroma cannot order by a field, and its HNSW search can stop short under a selective
``where``. These functions get ordered windows and ranked hits from it anyway, exactly:
each is given a ``where`` that selects a superset of the wanted records (the scope and
the compiled filter) and a predicate or :class:`~memcore_chroma.filters.CompiledFilter`
that settles the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from memcore.errors import StoreError
from memcore.filters import Filter
from memcore.kit import clamp_score, order_key
from memcore.records import MemoryRecord, ScoredRecord
from memcore.validation import Matrix
from memcore_chroma.calls import Method, Session, collection_call
from memcore_chroma.encoding import (
    CREATED_AT_KEY,
    RECORD_ID_KEY,
    Where,
    all_of,
    decode,
    decode_found,
    entry_id,
)
from memcore_chroma.filters import CompiledFilter

MIN_OVERFETCH = 64
"""Candidates fetched at least when a search must post-filter; then 4 times more per round."""

LISTING_SAMPLE = 2
"""An ordered read with a limit first times the ``LISTING_SAMPLE * limit`` records inserted last
(or first) to bound what it reads (see :func:`newest_or_oldest`)."""

LOST_ENTRY_RETRIES = 3
"""How many times :func:`asked_again_if_an_entry_vanished` asks in all."""

T = TypeVar("T")


def candidates(where: Where | None, ids: Sequence[str] | None = None) -> Session[list[MemoryRecord]]:
    """The records ``where`` selects (among ``ids``, if given)."""
    chosen = None if ids is None else list(ids)
    found = yield from collection_call(
        "reading records", "get", ids=chosen, where=where, include=["documents"]
    )
    return decode_found(found)


def asked_again_if_an_entry_vanished(action: str, method: Method, **kwargs: Any) -> Session[Any]:
    """``collection.<method>(**kwargs)``, asked again if an entry changed under the read.

    A Chroma server (1.5) sometimes raises "Error finding id" (an internal error) when another
    client writes or deletes a selected entry between its lookups: a ``get`` of embeddings with
    metadata racing a delete (about 1 read in 15 in a tight loop), a ``query`` racing upserts
    (rarer). Asked again, it reads the entries as they are now.
    """
    attempt = 1
    while True:
        try:
            return (yield from collection_call(action, method, **kwargs))
        except StoreError as error:
            if attempt == LOST_ENTRY_RETRIES or "error finding id" not in str(error).lower():
                raise
            attempt += 1


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def ordered(
    where: Where | None,
    node: Filter | None,
    compiled: CompiledFilter,
    descending: bool,
    limit: int | None,
) -> Session[list[MemoryRecord]]:
    """The records ``where`` selects that match ``node`` (compiled into ``compiled``), in
    (created_at, id) order, the first ``limit``."""
    if limit is None:
        records = [r for r in (yield from candidates(where)) if compiled.admits(node, r)]
        return sorted(records, key=order_key, reverse=descending)
    window = (yield from newest_or_oldest(where, limit, descending)) if compiled.exact else None
    if window is not None:
        return sorted(window, key=order_key, reverse=descending)[:limit]
    # Order by the small metadata first, then read only the documents needed.
    found = yield from collection_call("listing records", "get", where=where, include=["metadatas"])
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
        by_id = {entry_id(r): r for r in (yield from candidates(where, chunk))}
        result += [by_id[i] for i in chunk if i in by_id and compiled.admits(node, by_id[i])]
        if len(result) >= limit:
            break
    return result[:limit]


def newest_or_oldest(where: Where | None, limit: int, descending: bool) -> Session[list[MemoryRecord] | None]:
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
    ids = (yield from collection_call("listing ids", "get", where=where, include=[]))["ids"]
    size = LISTING_SAMPLE * limit
    if len(ids) <= size:
        return (yield from candidates(where))
    sample = ids[-size:] if descending else ids[:size]
    # Read without ``where`` (by id, cheap): only their times are used, as the bound.
    sampled = yield from collection_call("sampling times", "get", ids=sample, include=["metadatas"])
    times = [int(meta[CREATED_AT_KEY]) for meta in sampled["metadatas"] or []]
    if not times:
        return None  # all deleted meanwhile
    bound: Where = (
        {CREATED_AT_KEY: {"$gte": min(times)}} if descending else {CREATED_AT_KEY: {"$lte": max(times)}}
    )
    bounded = all_of([where, bound] if where is not None else [bound])
    records = yield from candidates(bounded)
    return records if len(records) >= limit else None


def vector_search(
    where: Where | None,
    query: Matrix,
    wanted: Callable[[MemoryRecord], bool],
    limit: int,
    exact_where: bool,
) -> Session[list[ScoredRecord]]:
    """The ``limit`` records nearest ``query`` among those ``where`` selects and ``wanted`` keeps.

    :param exact_where: ``where`` selects only wanted records, so Chroma's first ``limit`` hits
        are the answer; otherwise candidates are over-fetched, then fetched 4 times more per round.
    """
    fetch = limit if exact_where else max(limit * 4, MIN_OVERFETCH)
    while True:
        found = yield from asked_again_if_an_entry_vanished(
            "searching",
            "query",
            query_embeddings=query,
            n_results=fetch,
            where=where,
            include=["documents", "distances"],
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
            every = yield from collection_call("counting candidates", "get", where=where, include=[])
            if len(every["ids"]) <= len(ids):
                return hits
            return (yield from exact_search(where, query, wanted, limit))
        fetch *= 4


def exact_search(
    where: Where | None,
    query: Matrix,
    wanted: Callable[[MemoryRecord], bool],
    limit: int,
) -> Session[list[ScoredRecord]]:
    """Rank every candidate by cosine similarity with numpy (vectors are stored unit-length)."""
    found = yield from asked_again_if_an_entry_vanished(
        "searching exactly", "get", where=where, include=["embeddings", "documents"]
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
