"""How the Chroma stores read in order and search: the heuristics Chroma's API calls for.

Each read is a session of calls on the collection (:mod:`memcore_chroma.calls`), run through the
sync client or, on a server, the async one.

Chroma cannot order by a field, and its HNSW search can stop short under a selective
``where``. These functions get ordered windows and ranked hits from it anyway, exactly:
each is given a ``where`` that selects a superset of the wanted records (the scope and
the compiled filter) and a predicate (:data:`Keep`) that settles the rest.

Chroma evaluates every clause of a ``where`` over every entry it matches, whatever the other
clauses select: a clause that matches the whole collection, such as the implicit read condition
``expires_at > now``, costs a scan of it. So that condition is never sent; it is checked on each
record decoded, and reads that have the ids they want read them by id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from memcore.errors import StoreError
from memcore.kit import clamp_score, order_key
from memcore.records import MemoryRecord, ScoredRecord
from memcore.validation import Matrix
from memcore_chroma.calls import Method, Session, collection_call
from memcore_chroma.encoding import (
    CREATED_AT_KEY,
    RECORD_ID_KEY,
    VECTOR_KEY,
    Where,
    all_of,
    decode,
    decode_found,
    entry_id,
)

MIN_OVERFETCH = 64
"""Candidates fetched at least when a search must post-filter; then 4 times more per round."""

LISTING_SAMPLE = 2
"""An ordered read with a limit first times the ``LISTING_SAMPLE * limit`` records inserted last
(or first) to bound what it reads (see :func:`newest_or_oldest`)."""

BOUND_READ = 8
"""A window's time bound is read alone up to ``BOUND_READ * LISTING_SAMPLE * limit`` entries (ids
only) in :func:`newest_or_oldest`, ``BOUND_READ * limit`` (with documents and metadata) in
:func:`newest_since`, every scope's; beyond, with the scope's ``where``, or not at all."""

TAIL_SAMPLE = 4
""":func:`newest_from_tail` looks for a scope's newest records among the ``TAIL_SAMPLE * limit``
entries inserted last into the collection (every entry read costs: Chroma reads its metadata)."""

SHORTCUT_WINDOW = 256
"""The largest window the shortcuts of :mod:`~memcore_chroma.shortcuts` read (an agent's is a few
dozen records; Chroma refuses a ``get`` of 32,766 ids, which ``TAIL_SAMPLE`` windows of 8,192 reach)."""

UNFILTERED_READ = 4
""":func:`unfiltered_search` reads at most ``UNFILTERED_READ * limit`` of the nearest entries."""

CHROMA_EF_SEARCH = 100
"""The ``ef_search`` of a collection whose configuration does not say (Chroma's default)."""

SMALL_SELECTION = 256
"""A search whose ``where`` selects at most this many entries ranks them exactly
(:func:`small_selection_search`) instead of asking Chroma's HNSW search."""

MIN_HIT_PAGE = 16
"""Documents read at least at a time by :func:`hit_pages`, best first."""

LOST_ENTRY_RETRIES = 3
"""How many times :func:`asked_again_if_an_entry_vanished` asks in all."""

T = TypeVar("T")


Owns = Callable[[Any], bool]
"""Whether an entry's flat metadata says it is a record of the scope being read."""

Keep = Callable[[MemoryRecord], bool]
"""What a read checks of each record it decodes: the conditions its ``where`` left to the store
(the implicit read condition, always; the filter, where the ``where`` selects a superset or the
records were read by id)."""


def candidates(where: Where | None, ids: Sequence[str] | None = None) -> Session[list[MemoryRecord]]:
    """The records ``where`` selects (among ``ids``, if given)."""
    chosen = None if ids is None else list(ids)
    found = yield from collection_call(
        "reading records", "get", ids=chosen, where=where, include=["documents"]
    )
    return decode_found(found)


def by_ids(ids: Sequence[str]) -> Session[list[MemoryRecord]]:
    """The records of these entries, found by id alone.

    Chroma evaluates a ``where`` over the whole collection even when ``ids`` are given; ids alone
    are looked up. An entry's id is its record's exact scope and id
    (:func:`~memcore_chroma.encoding.entry_id`, which decoding checks), so ids listed under a
    scope's ``where`` (or made from an exact scope) read only that scope's records; the caller
    checks again what else the ``where`` said (:data:`Keep`), which may have changed since.
    """
    if not ids:
        return []  # Chroma reads ids=[] as no restriction
    found = yield from collection_call("reading records", "get", ids=list(ids), include=["documents"])
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


def hit_pages(ranked: Sequence[T], limit: int, depth: int = 0) -> Iterator[Sequence[T]]:
    """``ranked`` (best first) in the pages a search reads the documents and metadata of, to keep
    ``limit`` hits: first ``limit`` and a quarter more, then twice ``limit`` at a time (at least
    :data:`MIN_HIT_PAGE` each). Most of the best are kept, and each entry read costs Chroma about
    50 us (its metadata is a row per key), so a first page of twice ``limit`` paid for ~``limit``
    entries a search did not need: ~1 ms of a 25-hit recall.

    :param depth: how deep the last search of the same selection had to read for its hits (an
        agent holding half the collection: about ``2 x limit``); the first page reads that and a
        quarter more, if more (up to ``3 x limit``: Chroma refuses a ``get`` of 32,766 ids), so
        that a second call is rarely needed.
    """
    first = max(limit + limit // 4, min(depth + depth // 4, 3 * limit), MIN_HIT_PAGE)
    if ranked:  # never an empty page: Chroma refuses a get of no ids
        yield ranked[:first]
    yield from chunks(ranked[first:], max(2 * limit, MIN_HIT_PAGE))


def ordered(
    where: Where | None,
    keep: Keep,
    exact: bool,
    descending: bool,
    limit: int | None,
) -> Session[list[MemoryRecord]]:
    """The records ``where`` selects that ``keep`` keeps, in (created_at, id) order, the first ``limit``.

    :param exact: ``where`` selects only records that ``keep`` keeps but for the implicit read
        condition (which is never in ``where``), so that a window can be bounded by time.
    """
    if limit is None:
        records = [r for r in (yield from candidates(where)) if keep(r)]
        return sorted(records, key=order_key, reverse=descending)
    window = (yield from newest_or_oldest(where, keep, limit, descending)) if exact else None
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
    chunk_size = limit if exact else max(limit * 2, MIN_OVERFETCH)
    result: list[MemoryRecord] = []
    for chunk in chunks(entries, chunk_size):
        # Checked again: a record changed or deleted since the listing is skipped.
        by_id = {entry_id(r): r for r in (yield from by_ids(chunk))}
        result += [by_id[i] for i in chunk if i in by_id and keep(by_id[i])]
        if len(result) >= limit:
            break
    return result[:limit]


def newest_or_oldest(
    where: Where | None, keep: Keep, limit: int, descending: bool
) -> Session[list[MemoryRecord] | None]:
    """Records ``where`` selects and ``keep`` keeps, among them the ``limit`` newest
    (``descending``) or oldest of those; ``None`` if too many were deleted or expired meanwhile.

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
        # Every match: read by id, not by evaluating ``where`` over the collection again.
        return [r for r in (yield from by_ids(ids)) if keep(r)]
    sample = ids[-size:] if descending else ids[:size]
    # Read by id (cheap): only their times are used, as the bound.
    sampled = yield from collection_call("sampling times", "get", ids=sample, include=["metadatas"])
    times = [int(meta[CREATED_AT_KEY]) for meta in sampled["metadatas"] or []]
    if not times:
        return None  # all deleted meanwhile
    bound: Where = (
        {CREATED_AT_KEY: {"$gte": min(times)}} if descending else {CREATED_AT_KEY: {"$lte": max(times)}}
    )
    # The time bound alone is selective (the window's times), where ``where`` would scan the
    # scope again: its ids, listed under ``where`` above, say which are the scope's (records of
    # the scope written since that listing are left to the next read, as concurrent writes).
    # Unless other scopes wrote much since the bound: then ``where`` goes with the bound.
    recent = yield from collection_call(
        "bounding times", "get", where=bound, include=[], limit=BOUND_READ * size
    )
    if len(recent["ids"]) < BOUND_READ * size:
        listed = set(ids)
        records = yield from by_ids([i for i in recent["ids"] if i in listed])
    else:
        records = yield from candidates(all_of([where, bound] if where is not None else [bound]))
    kept = [r for r in records if keep(r)]
    return kept if len(kept) >= limit else None


def newest_from_tail(owns: Owns, keep: Keep, limit: int) -> Session[list[MemoryRecord] | None]:
    """The records of a scope (``owns``) that ``keep`` keeps, among them the ``limit`` newest,
    found without a ``where`` over the scope; ``None`` if the entries inserted last do not hold
    enough of its records to bound the window (then the caller reads it the sure way).

    Listing a scope's ids makes Chroma evaluate its ``where`` over every entry of the scope (an
    agent's whole history). Its newest records are usually among the entries inserted last into
    the collection, which Chroma reads by offset, with no ``where``: their times bound the window
    as :func:`newest_or_oldest` bounds it, and the bound alone (a range of times, selective) reads
    every entry newer than it, whatever the order they were inserted in.
    """
    sampled = TAIL_SAMPLE * limit
    total = yield from collection_call("counting entries", "count")
    start = max(0, total - sampled)
    # Ids alone by offset, then their metadata by id: asked together, Chroma joins the metadata
    # of every entry before the offset too (15 ms instead of 5 past 10,000 entries).
    newest = yield from collection_call(
        "listing the newest entries", "get", offset=start, limit=sampled, include=[]
    )
    listed = newest["ids"]
    whole_collection = start == 0 and len(listed) < sampled
    if not listed:
        return [] if whole_collection else None  # Chroma reads ids=[] as every entry
    tail = yield from collection_call("sampling the newest entries", "get", ids=listed, include=["metadatas"])
    owned = [
        (entry, meta) for entry, meta in zip(tail["ids"], tail["metadatas"] or [], strict=True) if owns(meta)
    ]
    if whole_collection:
        return [r for r in (yield from by_ids([entry for entry, _ in owned])) if keep(r)]
    times = sorted(int(meta[CREATED_AT_KEY]) for _, meta in owned)
    if len(times) < limit:
        return None
    return (yield from newest_since(times[-limit], owns, keep, limit))


def newest_since(bound: int, owns: Owns, keep: Keep, limit: int) -> Session[list[MemoryRecord] | None]:
    """The records of a scope (``owns``) created at ``bound`` (epoch microseconds) or later that
    ``keep`` keeps, if at least ``limit`` are (then they hold the scope's ``limit`` newest);
    ``None`` if fewer are, or if other scopes wrote too much since ``bound`` to read it all.

    The bound alone is a range of times, which Chroma's index selects: no ``where`` over the scope.
    """
    bounded = BOUND_READ * limit
    recent = yield from collection_call(
        "bounding times",
        "get",
        where={CREATED_AT_KEY: {"$gte": bound}},
        include=["documents", "metadatas"],
        limit=bounded,
    )
    if len(recent["ids"]) >= bounded:
        return None
    records = [
        decode(entry, document)
        for entry, document, meta in zip(
            recent["ids"], recent["documents"] or [], recent["metadatas"] or [], strict=True
        )
        if owns(meta)
    ]
    kept = [r for r in records if keep(r)]
    return kept if len(kept) >= limit else None


def few_listed(action: str, where: Where | None) -> Session[list[str] | None]:
    """The ids of the entries ``where`` selects if at most :data:`SMALL_SELECTION`, else ``None``."""
    listed = yield from collection_call(action, "get", where=where, include=[], limit=SMALL_SELECTION + 1)
    ids: list[str] = listed["ids"]
    return None if len(ids) > SMALL_SELECTION else ids


def selected_across_scopes(where: Where, owns: Owns, keep: Keep) -> Session[list[MemoryRecord] | None]:
    """The records of a scope (``owns``) that ``where`` (a filter, without the scope's clauses)
    selects and ``keep`` keeps, read across every scope; ``None`` if ``where`` selects more than
    :data:`SMALL_SELECTION` entries in the collection.

    A scope's clause makes Chroma evaluate it over every entry of the scope; a selective filter
    alone (the pinned system message of a session) selects a few entries of the whole collection.
    """
    listed = yield from few_listed("listing selected entries", where)
    if not listed:
        return None if listed is None else []
    found = yield from collection_call(
        "reading selected records", "get", ids=listed, include=["documents", "metadatas"]
    )
    return [
        record
        for entry, document, meta in zip(
            found["ids"], found["documents"] or [], found["metadatas"] or [], strict=True
        )
        if owns(meta) and keep(record := decode(entry, document))
    ]


def has_vector(meta: Any) -> bool:
    """Whether an entry's metadata says it holds the record's vector, not a stand-in."""
    return meta is not None and meta.get(VECTOR_KEY) is True


def vector_search(
    where: Where | None,
    query: Matrix,
    wanted: Keep,
    limit: int,
    exact_where: bool,
) -> Session[list[ScoredRecord]]:
    """The ``limit`` records nearest ``query`` among those ``where`` selects and ``wanted`` keeps.

    :param exact_where: ``where`` selects only wanted records but for the implicit read condition
        (expired records are rare), so Chroma's first ``limit`` hits are asked first; otherwise
        candidates are over-fetched. Each round that falls short asks 4 times more.
    """
    fetch = limit if exact_where else max(limit * 4, MIN_OVERFETCH)
    while True:
        found = yield from asked_again_if_an_entry_vanished(
            "searching",
            "query",
            query_embeddings=query,
            n_results=fetch,
            where=where,
            include=["documents", "distances", "metadatas"],
        )
        ids = found["ids"][0]
        hits = list(_hits(found, wanted, limit))
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


def unfiltered_search(
    query: Matrix, owns: Owns, wanted: Keep, limit: int, ef_search: int | None, depth: int = 0
) -> Session[BestRead | None]:
    """The ``limit`` records of a scope (``owns``) nearest ``query`` that ``wanted`` keeps, among
    the collection's nearest entries searched with no ``where``; ``None`` if too few of the first
    ``UNFILTERED_READ * limit`` of those are wanted (then the caller searches under the ``where``).
    Its hits and how deep it read for them (:class:`BestRead`; ``depth``: the last one's, for
    :func:`hit_pages`).

    Chroma evaluates a search's ``where`` over every entry it matches before its HNSW search: for
    a scope holding much of the collection (an agent that wrote half of it) that costs several
    times the search. Unfiltered, its wanted hits are the best of the collection's nearest. The
    nearest are asked as ids alone, then read by id, best first, a page at a time; an entry of
    another scope is skipped on its metadata, never decoded.

    :param ef_search: the collection's setting (``None``: Chroma's default). Chroma explores
        ``max(ef_search, n_results)`` candidates, over the whole collection here, where a search
        under the scope's ``where`` explores as many of the scope's own: twice ``ef_search``
        nearest are asked (or :func:`vector_search`'s over-fetch if more), so that the scope's
        share of them is explored about as deeply (asking only the over-fetch missed 9-12 of 400
        true hits at a 50 % share where the filtered search missed 0-2:
        ``benchmarks/chroma_unfiltered_recall.py``), and a narrow setting still narrows.
    """
    found = yield from asked_again_if_an_entry_vanished(
        "searching the whole collection",
        "query",
        query_embeddings=query,
        n_results=max(limit * UNFILTERED_READ, MIN_OVERFETCH, 2 * (ef_search or CHROMA_EF_SEARCH)),
        include=["distances"],
    )
    ids, distances = found["ids"][0], (found["distances"] or [[]])[0]
    nearest = [(entry, clamp_score(1.0 - distance)) for entry, distance in zip(ids, distances, strict=True)]
    read = nearest[: limit * UNFILTERED_READ]
    best = yield from best_read("reading the nearest entries", read, owns, wanted, limit, depth)
    return best if len(best.hits) == limit else None


class BestRead(NamedTuple):
    """What :func:`best_read` kept, and how many of the ranked entries it went through to the last."""

    hits: list[ScoredRecord]
    depth: int


def best_read(
    action: str, best: Sequence[tuple[str, float]], owns: Owns, wanted: Keep, limit: int, depth: int = 0
) -> Session[BestRead]:
    """The first ``limit`` entries of ``best`` (entry and score, best first) that hold a real
    vector, of a scope ``owns`` says holds them, whose records ``wanted`` keeps: documents and
    metadata read by id in :func:`hit_pages` (``depth``: the last such read's), an entry of
    another scope skipped on its metadata, never decoded."""
    hits: list[ScoredRecord] = []
    position = 0
    for page in hit_pages(best, limit, depth):
        read = yield from asked_again_if_an_entry_vanished(
            action, "get", ids=[entry for entry, _ in page], include=["documents", "metadatas"]
        )
        entries = dict(
            zip(read["ids"], zip(read["documents"] or [], read["metadatas"] or [], strict=True), strict=True)
        )
        for entry, score in page:
            position += 1
            document, meta = entries.get(entry, (None, None))
            if document is None or not has_vector(meta) or not owns(meta):
                continue  # deleted since, a stand-in, or another scope's
            record = decode(entry, document)
            if wanted(record):
                hits.append(ScoredRecord.of(record, score))
                if len(hits) == limit:
                    return BestRead(hits, position)
    return BestRead(hits, position)


def _hits(found: Any, wanted: Keep, limit: int) -> Iterator[ScoredRecord]:
    """The first ``limit`` hits of a ``query`` result that hold a real vector and that ``wanted`` keeps."""
    ids, documents = found["ids"][0], (found["documents"] or [[]])[0]
    distances, metadatas = (found["distances"] or [[]])[0], (found["metadatas"] or [[]])[0]
    count = 0
    for record_id, document, distance, meta in zip(ids, documents, distances, metadatas, strict=True):
        if document is None:
            continue  # deleted by another thread between Chroma's index lookup and its read
        if not has_vector(meta):
            continue
        record = decode(record_id, document)
        if wanted(record):
            yield ScoredRecord.of(record, clamp_score(1.0 - distance))
            count += 1
            if count == limit:
                return


def exact_search(
    where: Where | None,
    query: Matrix,
    wanted: Keep,
    limit: int,
) -> Session[list[ScoredRecord]]:
    """Rank every candidate by cosine similarity with numpy (vectors are stored unit-length)."""
    found = yield from asked_again_if_an_entry_vanished(
        "searching exactly", "get", where=where, include=["embeddings", "documents", "metadatas"]
    )
    return ranked(found, query, wanted, limit)


def small_selection_search(
    where: Where | None,
    query: Matrix,
    wanted: Keep,
    limit: int,
) -> Session[list[ScoredRecord] | None]:
    """The ``limit`` records nearest ``query`` that ``where`` selects and ``wanted`` keeps, ranked
    exactly, if ``where`` selects at most :data:`SMALL_SELECTION` entries; else ``None``.

    Chroma's HNSW search under a ``where`` that admits a small part of the collection costs
    many times the ``where`` itself (it walks the graph past entries it may not return): a
    tenant's 100 records among 100,000 entries took ~100 ms, listing their ids ~10 ms. So the ids
    are listed (no more than ``SMALL_SELECTION + 1``) and, if that is all, their vectors read by
    id and ranked with numpy; documents and metadata (several times the vectors' cost to read)
    only of the best, a few at a time. ``wanted`` must check what ``where`` says but the scope:
    an entry may have changed between the listing and the reads.
    """
    listed = yield from few_listed("listing candidates", where)
    if not listed:
        return None if listed is None else []
    found = yield from asked_again_if_an_entry_vanished(
        "searching exactly", "get", ids=listed, include=["embeddings"]
    )
    if not found["ids"]:
        return []
    vectors = np.asarray(found["embeddings"], dtype=np.float32)
    scores = np.clip(vectors.astype(np.float64) @ query[0].astype(np.float64), -1.0, 1.0)
    best = [(found["ids"][row], float(scores[row])) for row in np.argsort(-scores, kind="stable")]
    return (yield from best_read("reading hits", best, _any_owner, wanted, limit)).hits


def _any_owner(meta: Any) -> bool:
    return True


def ranked(found: Any, query: Matrix, wanted: Keep, limit: int) -> list[ScoredRecord]:
    """The ``limit`` entries of a ``get`` with embeddings, documents and metadatas nearest ``query``
    that hold a real vector and whose records ``wanted`` keeps."""
    if not found["ids"]:
        return []
    vectors = np.asarray(found["embeddings"], dtype=np.float32)
    scores = np.clip(vectors.astype(np.float64) @ query[0].astype(np.float64), -1.0, 1.0)
    hits: list[ScoredRecord] = []
    documents, metadatas = found["documents"] or [], found["metadatas"] or []
    for row in np.argsort(-scores, kind="stable"):
        if not has_vector(metadatas[row]):
            continue
        record = decode(found["ids"][row], documents[row])
        if wanted(record):
            hits.append(ScoredRecord.of(record, float(scores[row])))
            if len(hits) == limit:
                break
    return hits
