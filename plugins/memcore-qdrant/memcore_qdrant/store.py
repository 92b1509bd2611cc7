"""The Qdrant stores: one implementation over an :class:`~memcore_qdrant.engine.Engine`.

* :class:`QdrantStore` (``qdrant:///path``, ``qdrant://relative/path``): embedded, durable,
  on Qdrant Edge;
* :class:`QdrantMemoryStore` (``qdrant+memory://``): embedded, gone on close;
* :class:`QdrantServerStore` (``qdrant+http(s)://host:port[?collection=name]``): a Qdrant server.

They differ only in how they connect and in their capabilities. Every read and
delete sends the scope as top-level ``must`` conditions (:func:`~memcore_qdrant.filters.scoped`);
a read or delete by id matches the ``record_id`` payload field AND the scope. Every read (and
:meth:`QdrantStore._scopes`, :meth:`QdrantStore._replace`) also sends the implicit live condition,
``must_not: expires_at <= now`` (:meth:`QdrantStore._alive`), true of the points written before
records could expire, which have no ``expires_at``; Qdrant Edge leaves it out of the query of a
scope without expired points (:meth:`QdrantStore._alive_in`). Deletes reach expired records
too. A vector search whose filter only excludes (``$ne``/``$nin``, as recall's roles) checks it on the scope's
best hits first (:meth:`QdrantStore._best_hits_passing`). A record is its exact scope plus its
id, so a point's id is :func:`~memcore.scope.storage_id` of the two: the same id in two scopes is
two points. Text search is a case-insensitive substring match on a case-folded copy of the
content, done by Qdrant (``MatchSubstring``).
"""

from __future__ import annotations

import asyncio
import builtins
import os
import threading
from datetime import datetime
from typing import Any, ClassVar, Self, TypeVar
from uuid import UUID

import numpy as np

from memcore.errors import DimensionMismatchError
from memcore.filters import Comparison, Filter, evaluate
from memcore.keywords import idf, terms
from memcore.kit import check_same_dimension, clamp_score, order_key
from memcore.loop_bound import LoopBound
from memcore.queries import KeywordQuery, ListQuery, Order, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord, epoch_micros
from memcore.scope import Scope, storage_id
from memcore.sessions import OFFLOAD_AT, arun_session, run_session
from memcore.store import SERVER_WORKERS, BaseStore, Capabilities, VectorSpace
from memcore.urls import COLLECTION, StoreURL
from memcore.validation import Matrix
from memcore_qdrant import payload as fields
from memcore_qdrant.calls import ClientCall, EngineCall, Session, engine_call
from memcore_qdrant.connections import (
    API_KEY_ENV,
    DEFAULT_COLLECTION,
    Connection,
    connect_edge,
    connect_local_client,
    connect_memory,
    connect_server,
)
from memcore_qdrant.engine import Point
from memcore_qdrant.errors import translated
from memcore_qdrant.filters import (
    Clause,
    Condition,
    IsEmpty,
    Match,
    compile_filter,
    excludes_only,
    expresses,
    metadata_indexes,
    scoped,
    text_contains,
    with_ids,
    within,
)
from memcore_qdrant.keywords import query_vector

EXCLUSION_HEADROOM = 2
"""How many times ``limit`` hits a search with an excluding filter reads before checking the filter itself."""
EXCLUSION_MAX_LIMIT = 100
"""Above this limit an excluding filter goes to Qdrant: turning ``EXCLUSION_HEADROOM * limit``
payloads into records in Python costs more than Qdrant's point-by-point check."""
FACET_LIMIT = 1_000
"""How many ``scope_keys`` values :meth:`QdrantStore._scopes` first asks Qdrant's facet for; when
all of them come back, it asks again for 16 times as many, until fewer come back than were asked."""


T = TypeVar("T")


def _records(points: builtins.list[Point]) -> builtins.list[MemoryRecord]:
    return fields.records_from([p.payload for p in points])


def _point(record: MemoryRecord, row: Matrix | None) -> Point:
    """The point that stores ``record``, with its unit vector (a row of a matrix) if it has one."""
    vector = None if row is None else row.tolist()
    return Point(storage_id(record.scope, record.id), fields.to_payload(record), vector)


def _stored_scope(values: fields.ScopeValues) -> Scope:
    """The scope of these field values as stored, not validated again (a record stored before
    every scope had a tenant has none)."""
    tenant, user_id, agent_id, session_id = values
    return Scope.model_construct(tenant=tenant, user_id=user_id, agent_id=agent_id, session_id=session_id)


def _scored(record: MemoryRecord, score: float) -> ScoredRecord:
    return ScoredRecord.of(record, clamp_score(score))


class _Bounded:
    """An async client, with as many requests in flight at once as the sync API's workers make
    (:data:`~memcore.store.SERVER_WORKERS`): httpx's async pool slows down as more wait on it (a
    Chroma server store's async reads at 64 agents served a third of the thread pool's contexts
    per second unbounded, as many with this bound)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.slots = asyncio.Semaphore(SERVER_WORKERS)


async def _aclose(bounded: _Bounded) -> None:
    await bounded.client.close()


class QdrantStore(BaseStore):
    """memcore records as Qdrant points, searched by Qdrant.

    Open one with :func:`memcore.open_store` or :meth:`from_url`; or pass a
    :class:`~memcore_qdrant.connections.Connection` (for example
    ``connect_edge(path)``). Safe to share between threads: calls are serialised
    per engine, and every store object of this process on one embedded path
    shares its engine. A second process on the same path gets
    :class:`~memcore.errors.StoreLockedError`.
    """

    name: ClassVar[str] = "qdrant"
    db_system_name: ClassVar[str | None] = "qdrant"
    schemes: ClassVar[tuple[str, ...]] = ("qdrant",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, keyword_index=True, expiry=True)

    def __init__(self, connection: Connection) -> None:
        super().__init__()
        self._connection = connection
        self._engine = connection.engine
        self._lock = connection.lock
        self.location = connection.engine.location
        self._async_client: LoopBound[_Bounded] | None = None
        if (new_async_client := connection.new_async_client) is not None:
            self._async_client = LoopBound(lambda: _Bounded(new_async_client()), _aclose)

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``qdrant:///absolute/path`` or ``qdrant://relative/path`` (``~`` expands)."""
        return cls(connect_edge(os.path.expanduser(url.location())))

    @classmethod
    def open_local_client(cls, path: str | os.PathLike[str]) -> Self:
        """Open ``path`` with qdrant-client's local mode instead of Qdrant Edge.

        For comparisons only (``benchmarks/qdrant_embedded.py``): local mode
        evaluates every filter in Python, point by point.
        """
        return cls(connect_local_client(path))

    @property
    def dimension(self) -> int | None:
        return self._engine.dimension()

    def _expresses(self, comparison: Comparison) -> bool:
        return expresses(comparison)

    # -- running a hook's session (memcore_qdrant.calls): on the engine, or awaited natively ------

    def _run(self, action: str, session: Session[T]) -> T:
        with self._lock, translated(action, self.location):
            return run_session(session, self._make)

    def _make(self, call: EngineCall) -> Any:
        return getattr(self._engine, call.name)(*call.args, **call.kwargs)

    def _native_on_this_loop(self) -> bool:
        return self._async_client is not None and not self._closed and self._async_client.serves()

    async def _arun_session(self, action: str, session: Session[T]) -> T:
        """Await ``session`` on the loop: an engine call with a session of client calls
        (``ClientEngine.<name>_calls``) on the async client, any other (rare: a first vector, a
        metadata index) on a worker through the engine, under its lock."""
        bounded = None if self._async_client is None else self._async_client.client()
        if bounded is None:
            raise self._closed_error()  # closed (or reset by a fork) since the call started
        offload = self._worker_pool().run

        async def make_client_call(call: ClientCall) -> Any:
            async with bounded.slots:
                return await getattr(bounded.client, call.method)(*call.args, **call.kwargs)

        async def make(call: EngineCall) -> Any:
            calls = getattr(self._engine, call.name + "_calls", None)
            if calls is None:
                return await offload(self._locked, call)
            return await arun_session(calls(*call.args, **call.kwargs), make_client_call, offload)

        with translated(action, self.location):
            return await arun_session(session, make, offload)

    def _locked(self, call: EngineCall) -> Any:
        with self._lock:
            return self._make(call)

    # -- the hooks: each a session of engine calls, run by a sync hook and its async variant -----

    def _where(self, scope: Scope, node: Filter | None, *extra: Condition | None) -> Session[Clause]:
        """The native filter of a read: scope, then ``extra``, then the compiled filter."""
        if node is None:
            return scoped(scope, *extra)
        condition = compile_filter(node)
        # A metadata key is indexed the first time Qdrant evaluates a filter that reads it:
        # it otherwise checks the payload of every point in scope.
        yield from engine_call(self._engine.index_fields, metadata_indexes(condition))
        return scoped(scope, *extra, condition)

    def _read_where(self, scope: Scope, node: Filter | None, *extra: Condition | None) -> Session[Clause]:
        """The native filter of a read: :meth:`_where` of ``node``, and the live condition of ``scope``."""
        alive = yield from self._alive_in(scope)
        return (yield from self._where(scope, node, *extra, alive))

    def _alive(self) -> Condition:
        """The implicit read condition, compiled: ``must_not: expires_at <= now`` on the integer index
        (:func:`~memcore_qdrant.filters.compile_filter`), true of a point without ``expires_at``."""
        return compile_filter(self._now_live())

    def _now_live(self) -> Comparison:
        live = self._live_condition()
        assert live is not None  # every Qdrant store can expire records
        return live

    def _alive_in(self, scope: Scope) -> Session[Condition | None]:
        """The live condition of a read of ``scope`` (:meth:`_alive`); ``None`` on an engine that
        prunes it (:attr:`~memcore_qdrant.engine.Engine.prunes_live_condition`) when no point of
        ``scope`` has expired, as it then holds of every point the read can match. The engine first
        says whether any point at all can have expired (:meth:`~memcore_qdrant.engine.Engine.none_expired`),
        which spares the count on a store whose records all expire later, or never."""
        live = self._now_live()
        if self._engine.prunes_live_condition:
            assert isinstance(live.value, datetime)
            if (yield from engine_call(self._engine.none_expired, epoch_micros(live.value))):
                return None
            expired = compile_filter(Comparison(live.field, "$lte", live.value))
            if not (yield from engine_call(self._engine.count, scoped(scope, expired))):
                return None
        return compile_filter(live)

    def _ordered(self, where: Clause, order: Order, limit: int) -> Session[builtins.list[MemoryRecord]]:
        """The first ``limit`` records by (created_at, id): Qdrant orders by time, ties are settled here.

        One point more than asked tells whether the last one shares its time with points left
        out; only then is the tie read whole (times are strictly increasing within a process,
        so that second read is rare).
        """
        first = yield from engine_call(self._engine.scroll, where, limit=limit + 1, order=order)
        points = {p.id: p for p in first}
        if (
            len(first) > limit
            and first[limit].payload[fields.CREATED_AT] == first[limit - 1].payload[fields.CREATED_AT]
        ):
            boundary = Match(fields.CREATED_AT, first[limit - 1].payload[fields.CREATED_AT])
            tied = Clause(must=(*where.must, boundary), should=where.should, must_not=where.must_not)
            points.update((p.id, p) for p in (yield from engine_call(self._engine.scroll, tied)))
        records = sorted(_records(list(points.values())), key=order_key, reverse=order == "desc")
        return records[:limit]

    def _add(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None:
        self._run("add records", self._add_session(records, vectors))

    async def _aadd(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None:
        if len(records) >= OFFLOAD_AT:  # encoding the points and the request: CPU work
            await self._worker_pool().run(self._add, records, vectors)
        else:
            await self._arun_session("add records", self._add_session(records, vectors))

    def _add_session(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> Session[None]:
        if vectors is not None:
            yield from self._ensure_dimension(vectors.shape[1])
        points = [
            _point(record, None if vectors is None else vectors[row]) for row, record in enumerate(records)
        ]
        yield from engine_call(self._engine.upsert, points)

    def _replace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        return self._run("update a record", self._replace_session(old, new, vector))

    async def _areplace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        return await self._arun_session("update a record", self._replace_session(old, new, vector))

    def _replace_session(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> Session[bool]:
        """Overwrite the record's point with a conditional upsert (``update_only``) whose condition
        is that the point is live and still holds the very record JSON ``old`` was read from:
        Qdrant checks it and writes in one step, so a record deleted, expired or changed by
        another update since it was read is never overwritten (nor a deleted one brought back).

        Qdrant does not say whether a conditional upsert wrote, so the point is read back: if it
        does not hold ``new``, this returns ``False`` and ``update`` reads the record again and
        reapplies its change. (Embedded, the session runs under the engine's lock, so the write
        always lands when the condition held at the first read.)
        """
        where = scoped(old.scope.exact(), with_ids([old.id]), self._alive())
        found = yield from engine_call(self._engine.scroll, where)
        if len(found) != 1 or fields.from_payload(found[0].payload) != old:
            return False
        unchanged = Clause(
            must=(*where.must, Match(fields.RECORD, found[0].payload[fields.RECORD])),
            should=where.should,
            must_not=where.must_not,
        )
        if vector is not None:
            yield from self._ensure_dimension(vector.shape[1])
        point = _point(new, None if vector is None else vector[0])
        yield from engine_call(self._engine.replace, point, unchanged)
        written = yield from engine_call(self._engine.scroll, where)
        return len(written) == 1 and fields.from_payload(written[0].payload) == new

    def _ensure_dimension(self, dimension: int) -> Session[None]:
        current = yield from engine_call(self._engine.dimension)
        if current is None:
            space = yield from engine_call(self._engine.load_space)
            if space is not None and space.dimension != dimension:
                raise DimensionMismatchError(
                    f"vector dimension {dimension} does not match the bound embedder's {space.dimension}"
                )
            yield from engine_call(self._engine.add_vectors, dimension)
        else:
            check_same_dimension(current, dimension)

    def _get(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]:
        return self._run("get records", self._get_session(scope, ids))

    async def _aget(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]:
        return await self._arun_session("get records", self._get_session(scope, ids))

    def _get_session(self, scope: Scope, ids: builtins.list[UUID]) -> Session[builtins.list[MemoryRecord]]:
        where = yield from self._read_where(scope, None, with_ids(ids))
        return _records((yield from engine_call(self._engine.scroll, where)))

    def _vectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        return self._run("read vectors", self._vectors_session(scope, ids))

    async def _avectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        return await self._arun_session("read vectors", self._vectors_session(scope, ids))

    def _vectors_session(
        self, scope: Scope, ids: builtins.list[UUID]
    ) -> Session[builtins.list[tuple[UUID, Matrix]]]:
        where = yield from self._read_where(scope, None, with_ids(ids))
        points = yield from engine_call(self._engine.scroll, where, with_vectors=True)
        return [
            (fields.from_payload(p.payload).id, np.asarray(p.vector, dtype=np.float32))
            for p in points
            if p.vector is not None
        ]

    def _list(self, scope: Scope, query: ListQuery) -> builtins.list[MemoryRecord]:
        return self._run("list records", self._list_session(scope, query))

    async def _alist(self, scope: Scope, query: ListQuery) -> builtins.list[MemoryRecord]:
        return await self._arun_session("list records", self._list_session(scope, query))

    def _list_session(self, scope: Scope, query: ListQuery) -> Session[builtins.list[MemoryRecord]]:
        order = query.order
        where = yield from self._read_where(scope, within(query.filter, query.after, query.before))
        if query.limit is not None:
            return (yield from self._ordered(where, order, query.limit))
        points = yield from engine_call(self._engine.scroll, where)
        return sorted(_records(points), key=order_key, reverse=order == "desc")

    def _search(self, scope: Scope, request: SearchQuery) -> builtins.list[ScoredRecord]:
        return self._run("search", self._search_session(scope, request))

    async def _asearch(self, scope: Scope, request: SearchQuery) -> builtins.list[ScoredRecord]:
        return await self._arun_session("search", self._search_session(scope, request))

    def _search_session(self, scope: Scope, request: SearchQuery) -> Session[builtins.list[ScoredRecord]]:
        query, text, node, limit = request.vector, request.text, request.filter, request.limit
        substring = None if text is None else text_contains(text)
        if query is None:
            where = yield from self._read_where(scope, node, substring)
            return [ScoredRecord.of(r, 1.0) for r in (yield from self._ordered(where, "desc", limit))]
        if (yield from engine_call(self._engine.dimension)) is None:
            # Not dead code: BaseStore.search lets a query through when an embedder is bound
            # but no vector was written yet, and Qdrant has no ``dense`` vector to search then.
            return []
        vector = query[0].tolist()
        alive = yield from self._alive_in(scope)
        if node is not None and limit <= EXCLUSION_MAX_LIMIT and excludes_only(node):
            where = scoped(scope, substring, alive)
            found = yield from self._best_hits_passing(node, vector, where, limit)
            if found is not None:
                return found
        where = yield from self._where(scope, node, substring, alive)
        hits = yield from engine_call(self._engine.query, vector, where, limit)
        records = fields.records_from([h.payload for h in hits])
        return [_scored(record, hit.score) for record, hit in zip(records, hits, strict=True)]

    def _best_hits_passing(
        self, node: Filter, vector: builtins.list[float], where: Clause, limit: int
    ) -> Session[builtins.list[ScoredRecord] | None]:
        """The ``limit`` best hits of ``where`` that pass ``node``, if they are among its
        ``EXCLUSION_HEADROOM * limit`` best; ``None`` when too few of those pass.

        For a filter that only excludes: Qdrant Edge checks a ``must_not`` point by point over the
        whole scope, which costs recall's role exclusion more than the scoped search itself, while
        such a filter usually removes few of the best hits. The filter's ranking is the scope's
        with some hits left out, so if enough of the best hits pass, they are the filtered
        search's (up to the order of equal scores, which Qdrant leaves open on both paths); when
        the scope holds fewer hits than were asked for, the ones that pass are all there are. No
        metadata index is made here: only Qdrant's filtered query would use it.
        """
        wanted = EXCLUSION_HEADROOM * limit
        hits = yield from engine_call(self._engine.query, vector, where, wanted)
        passing = []
        for hit in hits:
            record = fields.from_payload(hit.payload)
            if evaluate(node, record):
                passing.append(_scored(record, hit.score))
                if len(passing) == limit:
                    return passing
        return passing if len(hits) < wanted else None

    def _keyword_search(self, scope: Scope, query: KeywordQuery) -> builtins.list[ScoredRecord]:
        return self._run("keyword search", self._keyword_session(scope, query))

    async def _akeyword_search(self, scope: Scope, query: KeywordQuery) -> builtins.list[ScoredRecord]:
        return await self._arun_session("keyword search", self._keyword_session(scope, query))

    def _keyword_session(self, scope: Scope, query: KeywordQuery) -> Session[builtins.list[ScoredRecord]]:
        """BM25 ranked by Qdrant over the ``keywords`` sparse vectors (:mod:`memcore_qdrant.keywords`).

        The idf of each query term is counted among the live records of the reading scope (and
        filter): one count of the scope, one per term, each answered by payload indexes.
        """
        wanted = sorted(set(terms(query.keywords)))
        if not wanted:
            return []
        where = yield from self._read_where(scope, query.filter)
        documents = yield from engine_call(self._engine.count, where)
        weights = {}
        for term in wanted:
            having = Clause(
                must=(*where.must, Match(fields.TERMS, term)),
                should=where.should,
                must_not=where.must_not,
            )
            seen = (yield from engine_call(self._engine.count, having)) if documents else 0
            if seen:
                weights[term] = idf(documents, seen)
        if not weights:
            return []
        limit = query.limit or documents
        hits = yield from engine_call(self._engine.keyword_query, query_vector(weights), where, limit)
        hits = [h for h in hits if h.score > 0]
        records = fields.records_from([h.payload for h in hits])
        found = list(zip([h.score for h in hits], records, strict=True))
        # Equal scores, newest first (as the exact scan orders them); Qdrant leaves ties unordered.
        found.sort(key=lambda hit: (hit[0], order_key(hit[1])), reverse=True)
        return [ScoredRecord.of(record, score) for score, record in found]

    def _count(self, scope: Scope, node: Filter | None) -> int:
        return self._run("count records", self._count_session(scope, node))

    async def _acount(self, scope: Scope, node: Filter | None) -> int:
        return await self._arun_session("count records", self._count_session(scope, node))

    def _count_session(self, scope: Scope, node: Filter | None) -> Session[int]:
        return (yield from engine_call(self._engine.count, (yield from self._read_where(scope, node))))

    def _scopes(self, prefix: Scope) -> builtins.list[tuple[Scope, int]]:
        return self._run("list scopes", self._scopes_session(prefix))

    async def _ascopes(self, prefix: Scope) -> builtins.list[tuple[Scope, int]]:
        return await self._arun_session("list scopes", self._scopes_session(prefix))

    def _scopes_session(self, prefix: Scope) -> Session[builtins.list[tuple[Scope, int]]]:
        """The exact scopes of the live points ``prefix`` sees, from exact facets of Qdrant on the
        keyword-indexed ``scope_keys`` (scope and live condition as their filter), inverted into the
        count of each exact scope (:func:`~memcore_qdrant.payload.exact_scope_counts`): no point
        is read, and points of every layout carry ``scope_keys``.

        The keys with a tenant come from one facet of the scope; the keys without one (points
        stored before every scope had a tenant; earlier layouts listed them for every point) from
        a second facet of the points without a tenant, asked only when ``prefix`` is
        :meth:`~memcore.scope.Scope.everything` (any other scope names a tenant)."""
        where = scoped(prefix, (yield from self._alive_in(prefix)))
        keys = [hit for hit in (yield from self._facet(where)) if fields.has_tenant(hit[0])]
        if prefix.tenant is None:
            tenantless = Clause((*where.must, IsEmpty(fields.TENANT)), where.should, where.must_not)
            keys += yield from self._facet(tenantless)
        return [(_stored_scope(values), count) for values, count in fields.exact_scope_counts(keys)]

    def _facet(self, where: Clause) -> Session[builtins.list[tuple[str, int]]]:
        """Every ``scope_keys`` value of the points matching ``where``, with its count."""
        limit = FACET_LIMIT
        while True:
            hits = yield from engine_call(self._engine.facet, fields.SCOPE_KEYS, where, limit)
            if len(hits) < limit:
                return hits
            limit *= 16

    def _delete(self, scope: Scope, ids: builtins.list[UUID]) -> int:
        return self._run("delete records", self._deletion(scoped(scope, with_ids(ids))))

    async def _adelete(self, scope: Scope, ids: builtins.list[UUID]) -> int:
        return await self._arun_session("delete records", self._deletion(scoped(scope, with_ids(ids))))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        return self._run("delete records", self._deletion_where(scope, node))

    async def _adelete_where(self, scope: Scope, node: Filter | None) -> int:
        return await self._arun_session("delete records", self._deletion_where(scope, node))

    def _deletion_where(self, scope: Scope, node: Filter | None) -> Session[int]:
        return (yield from self._deletion((yield from self._where(scope, node))))

    def _deletion(self, where: Clause) -> Session[int]:
        found = yield from engine_call(self._engine.count, where)
        if found:
            yield from engine_call(self._engine.delete, where)
        return found

    def _purge(self) -> None:
        """Physically erase deleted records (expired ones are deleted first, by :meth:`sweep`): the
        embedded shard is rebuilt from its remaining points.

        On a server, Qdrant's optimizer vacuums deleted points on its own schedule.
        """
        with self._lock, translated("purge", self.location):
            self._engine.purge()

    def _load_vector_space(self) -> VectorSpace | None:
        with self._lock:
            return self._engine.load_space()

    def _save_vector_space(self, space: VectorSpace) -> None:
        with self._lock, translated("save the vector space", self.location):
            if self._engine.dimension() not in (None, space.dimension):
                raise DimensionMismatchError(
                    f"the store holds {self._engine.dimension()}-dimensional vectors, not {space.dimension}"
                )
            self._engine.save_space(space)

    def _reconnect_in_child(self) -> None:
        """In a forked child: a server store gets a client of its own; an embedded one refuses.

        :raises StoreForkedError: for ``qdrant://`` and ``qdrant+memory://``, whose shard the
            parent owns (open the store again in the child once the parent closed it, or use a server).
        """
        if self._connection.reconnect is None:
            super()._reconnect_in_child()
            return
        with translated("reconnect in a forked process", self.location):
            self._connection.reconnect()
        self._lock = threading.RLock()  # a parent thread may have held the inherited one at the fork
        if self._async_client is not None:
            self._async_client.forget_after_fork()

    def _close(self) -> None:
        with translated("close", self.location):
            if self._async_client is not None:
                self._async_client.close()
            self._connection.release()


class QdrantMemoryStore(QdrantStore):
    """``qdrant+memory://``: a Qdrant Edge shard in a temporary folder, deleted on close."""

    schemes: ClassVar[tuple[str, ...]] = ("qdrant+memory",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, keyword_index=True, expiry=True)

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``qdrant+memory://`` (nothing may follow the scheme)."""
        url.require_empty_location()
        return cls(connect_memory())


DEFAULT_PORT = 6333


class QdrantServerStore(QdrantStore):
    """``qdrant+http(s)://host:port[?collection=name]``: a collection (default ``memcore``) on a server.

    The API key comes from ``$QDRANT_API_KEY``. Several processes may share the
    collection; the counts deletes return are then per call, not transactions
    across clients.
    """

    schemes: ClassVar[tuple[str, ...]] = ("qdrant+http", "qdrant+https")
    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, ann=True, server=True, keyword_index=True, expiry=True
    )

    url_params: ClassVar[frozenset[str]] = frozenset({COLLECTION})

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``qdrant+http(s)://host[:port]`` (port 6333 by default; ``?collection=``)."""
        host, port = url.server(DEFAULT_PORT, secret_hint=f"give the API key in ${API_KEY_ENV}")
        scheme = url.scheme.removeprefix("qdrant+")
        return cls(
            connect_server(f"{scheme}://{host}:{port}", url.text_param(COLLECTION, DEFAULT_COLLECTION))
        )
