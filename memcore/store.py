"""The storage contract every backend implements, and a base class that enforces it.

A store keeps :class:`~memcore.records.MemoryRecord` objects, optionally with a
vector each, and answers reads that are always scoped. A record is its exact
scope plus its id: two scopes may hold records with the same id, and neither
can tell, overwrite or block the other's (a wide scope's ``get`` sees both). :class:`BaseStore`
(also named :data:`Store`) is both what callers program against and what backends subclass: its
public methods are the one statement of the contract's signatures; it validates every argument
the same way for all backends (see :mod:`memcore.validation`), refuses calls after
:meth:`~BaseStore.close`, builds request objects (:mod:`memcore.queries`) and hands them to a
small set of ``_hooks``, evaluating exactly what a backend declines to (:meth:`BaseStore._expresses`).

Every public method has an async twin (``aadd`` for ``add``, ``async with`` for ``with``) with
the same validation, errors and results: each operation is written once, as a plan of hook calls
(:mod:`memcore.plans`), and run either here or on the store's worker threads
(:mod:`memcore.workers`), or natively where a backend gives a hook an async variant.
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
import os
import random
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from types import TracebackType
from typing import Any, ClassVar, Literal, ParamSpec, Self, TypeAlias, TypeVar
from uuid import UUID

from memcore.errors import (
    AmbiguousIdError,
    ConflictError,
    EmbedderMismatchError,
    InvalidInputError,
    RecordNotFoundError,
    StoreClosedError,
    StoreForkedError,
    UnsupportedOperationError,
)
from memcore.filters import Comparison, Filter, FilterSpec, conjunction, evaluate, parse_filter, split_filter
from memcore.keywords import bm25_scores
from memcore.kit import order_key
from memcore.plans import Plan, arun_plan, call, run_plan
from memcore.queries import KeywordQuery, ListQuery, Order, SearchQuery
from memcore.records import NEVER_EXPIRES, MemoryRecord, MetadataValue, ScoredRecord, epoch_micros, in_utc
from memcore.scope import SCOPE_FIELDS, Scope, scope_order
from memcore.telemetry import store_operation
from memcore.urls import StoreURL
from memcore.validation import (
    DEFAULT_LIMIT,
    TTL,
    Matrix,
    Vector,
    Vectors,
    check_ids,
    check_limit,
    check_query_vector,
    check_records,
    check_scope,
    check_ttl,
    check_vectors,
    normalize_rows,
)
from memcore.workers import WorkerPool

P = ParamSpec("P")
R = TypeVar("R")

_UPDATE_ATTEMPTS = 20
"""How many times ``update`` reads a record again that changed between its read and its write
(waiting a random moment, up to twice as long each time, so that writers that keep colliding
spread out)."""
_LAST_NOW = NEVER_EXPIRES - timedelta(microseconds=1)
_OVERFETCH = 4
"""How many times ``limit`` hits a search with a residue filter reads, and by how much it grows."""
_MIN_FETCH = 32
SERVER_WORKERS = 8
"""How many calls a server store's async API has in flight at once, by default."""
_HOOKS = (
    "_add",
    "_get",
    "_vectors",
    "_list",
    "_search",
    "_count",
    "_keyword_search",
    "_delete",
    "_delete_where",
    "_replace",
    "_scopes",
)
"""The hooks plans call (:mod:`memcore.plans`); a backend may give any of them an async variant."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, for callers choosing one and for the conformance suite.

    :param durable: records survive close and reopen (and a killed process).
    :param ann: vector search is approximate (an ANN index), not exact.
    :param text_search: ``search(text=...)`` is supported.
    :param server: the data lives in a server process, not in this one.
    :param keyword_index: ``search(keywords=...)`` reads an index instead of scanning every
        record of the scope, so it stays fast as the scope grows (with a filter beyond role and
        kind, the built-in stores still scan). Descriptive, for callers choosing a store.
    :param default_recall: what a memory's ``recall_mode="auto"`` means over this store:
        ``"hybrid"`` where keyword search and the small ordered reads of hybrid recall's
        neighbours are cheap enough for every turn (``memcore bench``'s agent loop), else
        ``"dense"``.
    :param expiry: records may expire (``expires_at``, ``add(ttl=...)``): the store hides expired
        records on every read path, natively, and ``purge()`` erases them. A store without it
        refuses both, never storing an expiry it would not honour.
    """

    durable: bool
    ann: bool = False
    text_search: bool = True
    server: bool = False
    keyword_index: bool = False
    default_recall: Literal["dense", "hybrid"] = "dense"
    expiry: bool = False


@dataclass(frozen=True)
class ScopeCount:
    """One scope :meth:`BaseStore.scopes` found, and how many live records it holds."""

    scope: Scope
    count: int


class _Keep(Enum):
    KEEP = "keep"


KEEP = _Keep.KEEP
"""``update(ttl=KEEP)``, the default: leave the record's expiry as it is."""

Clock = Callable[[], datetime]
"""What tells a store the time: returns a timezone-aware datetime."""


def system_clock() -> datetime:
    """The wall clock, in UTC: every store's default :attr:`BaseStore.clock`."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class VectorSpace:
    """Where a store's vectors come from: the embedder's name and its dimension."""

    embedder: str
    dimension: int


_open_stores: weakref.WeakSet[BaseStore] = weakref.WeakSet()
_fork_lock = threading.Lock()


def _reset_locks_after_fork() -> None:
    """In a forked child: a parent thread may have held these locks at the fork; they would never
    be released here."""
    global _fork_lock
    _fork_lock = threading.Lock()
    for store in list(_open_stores):
        store._state_lock = threading.Lock()
        store._workers_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_locks_after_fork)


def _retrieve_outcome(task: asyncio.Future[Any]) -> None:
    """A shielded write whose caller was cancelled still ends: note its error as retrieved (it
    was the caller's to see), instead of logging it as never retrieved."""
    if not task.cancelled():
        task.exception()


def text_matches(text: str, content: str) -> bool:
    """What ``search(text=...)`` means: a case-insensitive substring match."""
    return text.casefold() in content.casefold()


def _check_datetime(name: str, value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInputError(f"{name} must be a timezone-aware datetime, got {value!r}")
    try:
        return in_utc(value)
    except ValueError as exc:
        raise InvalidInputError(f"{name}: {exc}") from None


class BaseStore(ABC):
    """Validation, the closed check and the context manager, shared by all backends.

    Subclasses set ``name``, ``schemes`` and ``capabilities``, implement
    :meth:`from_url`, :attr:`dimension` and the ``_underscore`` methods. Those
    receive validated input: records checked, vectors as finite float32 matrices
    normalised to unit length, ids as UUIDs, filters parsed, limits in range,
    datetimes in UTC. They must apply the scope natively and translate their
    client's exceptions into :mod:`memcore.errors`.

    A store object belongs to the process that opened it. In a process forked from
    that one, the first call runs :meth:`_reconnect_in_child`: a server store opens
    connections of its own there (never using the parent's sockets, which would
    mix two processes' replies); every other store raises
    :class:`~memcore.errors.StoreForkedError`. ``close()`` in such a child only
    marks the object closed: the engine, locks and connections are the parent's.
    """

    name: ClassVar[str]
    schemes: ClassVar[tuple[str, ...]]
    capabilities: ClassVar[Capabilities]
    db_system_name: ClassVar[str | None] = None
    """The engine, as OpenTelemetry's ``db.system.name`` names it on the store's spans
    (``postgresql``, ``qdrant``...); ``None``: ``memcore.<name>``, a store memcore implements."""

    def __init__(self) -> None:
        self._closed = False
        self._state_lock = threading.Lock()
        self._bound_space: VectorSpace | None = None
        self._workers: WorkerPool | None = None
        self._workers_lock = threading.Lock()
        self._native_runs: set[asyncio.Future[Any]] = set()
        self._process = os.getpid()
        self.clock: Clock = system_clock
        """What the store takes for "now" when it decides which records have expired, and when
        ``add(ttl=...)`` and ``update`` stamp records; replace it to control time in tests."""
        _open_stores.add(self)

    url_params: ClassVar[frozenset[str]] = frozenset()
    """The query parameters the store's URLs take (see :mod:`memcore.urls`)."""

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Open the store that ``url`` (one of :attr:`schemes`) names.

        :raises InvalidInputError: for a malformed URL or a parameter the store does not take.
        """
        parsed = StoreURL.parse(url, params=cls.url_params)
        if parsed.scheme not in cls.schemes:
            raise InvalidInputError(
                f"the {cls.name} store opens {', '.join(cls.schemes)}:// URLs, got {url!r}"
            )
        return cls.open_url(parsed)

    @classmethod
    @abstractmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open the store ``url`` names, parsed and its parameters checked against :attr:`url_params`."""

    @property
    @abstractmethod
    def dimension(self) -> int | None:
        """The vector dimension, fixed by the first vector written (``None`` before)."""

    @store_operation("add")
    def add(
        self, records: Sequence[MemoryRecord], vectors: Vectors | None = None, *, ttl: TTL | None = None
    ) -> None:
        """Insert or replace records, each with its vector when ``vectors`` is given.

        A record is replaced by one with the same id *and the same scope*; the same id
        in another scope is another record, so a writer learns nothing about, and
        cannot block, the ids other scopes use. Replacing a record replaces its
        vector too (none if ``vectors`` is omitted). A batch is written whole or not at all.

        :param ttl: a time to live (a timedelta or seconds): every record of the batch expires
            that long from now (:attr:`clock`), replacing its own ``expires_at``.
        :raises InvalidRecordError: for invalid or oversized records.
        :raises UnsupportedOperationError: for ``ttl`` or an ``expires_at`` on a store without
            :attr:`Capabilities.expiry`.
        :raises InvalidVectorError: for invalid vectors (NaN, infinity, zero, empty).
        :raises DimensionMismatchError: if a vector does not match :attr:`dimension`.
        """
        run_plan(self._add_plan(records, vectors, ttl))

    @store_operation("add")
    async def aadd(
        self, records: Sequence[MemoryRecord], vectors: Vectors | None = None, *, ttl: TTL | None = None
    ) -> None:
        """:meth:`add`, awaited. Cancelling it never leaves part of the batch: a write the engine
        has started lands whole, else nothing does."""
        await self._arun(self._add_plan(records, vectors, ttl), whole=True)

    def _add_plan(
        self, records: Sequence[MemoryRecord], vectors: Vectors | None, ttl: TTL | None
    ) -> Plan[None]:
        self._check_open()
        batch = self._with_expiry(check_records(records), ttl)
        matrix = None
        if vectors is not None:
            checked = check_vectors(vectors, len(batch), self._expected_dimension(), copy=False)
            matrix = normalize_rows(checked)
        if batch:
            yield from call(self._add, batch, matrix)

    def _with_expiry(
        self, batch: builtins.list[MemoryRecord], ttl: TTL | None
    ) -> builtins.list[MemoryRecord]:
        """``batch`` with ``ttl`` applied; refused where the store cannot honour an expiry."""
        if not self.capabilities.expiry:
            if ttl is not None or any(record.expires_at is not None for record in batch):
                raise UnsupportedOperationError(
                    f"the {self.name} store cannot expire records: write them without ttl or expires_at"
                )
            return batch
        if ttl is None:
            return batch
        expires_at = self.expiry_after(ttl)
        return [record.model_copy(update={"expires_at": expires_at}) for record in batch]

    def expiry_after(self, ttl: TTL) -> datetime:
        """When a record given ``ttl`` (a timedelta or seconds) now expires.

        :raises InvalidInputError: for a ttl that is not positive and finite, or that ends after
            :data:`~memcore.records.NEVER_EXPIRES`.
        """
        try:
            expires_at = self.now() + check_ttl(ttl)
        except OverflowError:
            expires_at = NEVER_EXPIRES
        if expires_at >= NEVER_EXPIRES:
            raise InvalidInputError(f"ttl {ttl} ends after {NEVER_EXPIRES.isoformat()}, the latest expiry")
        return expires_at

    def now(self) -> datetime:
        """The store's time (its :attr:`clock`), in UTC; a clock past the latest expiry reads as
        the microsecond before it, so records that never expire stay live whatever the clock says.

        :raises InvalidInputError: if the clock does not return a timezone-aware datetime.
        """
        moment = self.clock()
        if not isinstance(moment, datetime):
            raise InvalidInputError(f"the store's clock must return an aware datetime, got {moment!r}")
        try:
            moment = in_utc(moment)
        except ValueError as exc:
            raise InvalidInputError(f"the store's clock: {exc}") from None
        return min(moment, _LAST_NOW)

    def _live_condition(self) -> Comparison | None:
        """The implicit read condition beside the scope: not expired at :meth:`now`. Every read
        hook of a store with :attr:`Capabilities.expiry` applies it in its engine's query
        (``None`` for a store without)."""
        if not self.capabilities.expiry:
            return None
        return Comparison("expires_at", "$gt", self.now())

    def _live_micros(self) -> int | None:
        """The implicit read condition as a bound: records expiring after this many epoch
        microseconds are live (``None`` for a store without :attr:`Capabilities.expiry`)."""
        return epoch_micros(self.now()) if self.capabilities.expiry else None

    def _live(self, node: Filter | None) -> Filter | None:
        """``node`` and the implicit read condition, as one filter for a backend's compiler."""
        return conjunction([node, self._live_condition()])

    @store_operation("get")
    def get(self, scope: Scope, ids: Sequence[UUID | str]) -> builtins.list[MemoryRecord]:
        """The records with these ids that ``scope`` can see, in the order asked.

        Ids that do not exist, or belong to another scope, are simply absent. An id
        that names records in several exact scopes within ``scope`` gives each of
        them, ordered by scope (tenant, user, agent, session; unset first).
        """
        return run_plan(self._get_plan(scope, ids))

    @store_operation("get")
    async def aget(self, scope: Scope, ids: Sequence[UUID | str]) -> builtins.list[MemoryRecord]:
        """:meth:`get`, awaited."""
        return await self._arun(self._get_plan(scope, ids))

    def _get_plan(self, scope: Scope, ids: Sequence[UUID | str]) -> Plan[builtins.list[MemoryRecord]]:
        self._check_open()
        wanted = list(dict.fromkeys(check_ids(ids)))
        scope = check_scope(scope)
        if not wanted:
            return []
        found: dict[UUID, builtins.list[MemoryRecord]] = {}
        records = yield from call(self._get, scope, wanted)
        for record in sorted(records, key=lambda r: scope_order(r.scope)):
            found.setdefault(record.id, []).append(record)
        return [record for record_id in wanted for record in found.get(record_id, ())]

    @store_operation("vectors")
    def vectors(self, scope: Scope, ids: Sequence[UUID | str]) -> dict[UUID, Matrix]:
        """The vectors of the records with these ids that ``scope`` can see, as the store keeps
        them: unit length, float32, one row each. Records without a vector, in another scope
        or absent are left out. For export and migration, and for re-ranking by vector.

        :raises AmbiguousIdError: if an id names records in several exact scopes within
            ``scope``; ask each record's ``scope.exact()``.
        """
        return run_plan(self._vectors_plan(scope, ids))

    @store_operation("vectors")
    async def avectors(self, scope: Scope, ids: Sequence[UUID | str]) -> dict[UUID, Matrix]:
        """:meth:`vectors`, awaited."""
        return await self._arun(self._vectors_plan(scope, ids))

    def _vectors_plan(self, scope: Scope, ids: Sequence[UUID | str]) -> Plan[dict[UUID, Matrix]]:
        self._check_open()
        wanted = list(dict.fromkeys(check_ids(ids)))
        scope = check_scope(scope)
        found: dict[UUID, Matrix] = {}
        for record_id, vector in (yield from call(self._vectors, scope, wanted)) if wanted else ():
            if record_id in found:
                raise AmbiguousIdError(
                    f"id {record_id} names records in several scopes within {scope}; "
                    "read each record's vector through its exact scope"
                )
            found[record_id] = vector
        return found

    @store_operation("list")
    def list(
        self,
        scope: Scope,
        *,
        filter: FilterSpec | Filter | None = None,
        order: Order = "asc",
        limit: int | None = None,
        before: datetime | None = None,
        after: datetime | None = None,
    ) -> builtins.list[MemoryRecord]:
        """Records ordered by ``created_at`` then id.

        :param order: ``"asc"`` (oldest first) or ``"desc"``.
        :param limit: at most this many (after ordering); ``None`` for all.
        :param before: only records created strictly before this time.
        :param after: only records created strictly after this time.
        """
        return run_plan(self._list_plan(scope, filter, order, limit, before, after))

    @store_operation("list")
    async def alist(
        self,
        scope: Scope,
        *,
        filter: FilterSpec | Filter | None = None,
        order: Order = "asc",
        limit: int | None = None,
        before: datetime | None = None,
        after: datetime | None = None,
    ) -> builtins.list[MemoryRecord]:
        """:meth:`list`, awaited."""
        return await self._arun(self._list_plan(scope, filter, order, limit, before, after))

    def _list_plan(
        self,
        scope: Scope,
        filter: FilterSpec | Filter | None,
        order: Order,
        limit: int | None,
        before: datetime | None,
        after: datetime | None,
    ) -> Plan[builtins.list[MemoryRecord]]:
        self._check_open()
        if order not in ("asc", "desc"):
            raise InvalidInputError(f"order must be 'asc' or 'desc', got {order!r}")
        query = ListQuery(
            parse_filter(filter),
            order,
            check_limit(limit, required=False),
            _check_datetime("before", before),
            _check_datetime("after", after),
        )
        return (yield from self._list_with_residue(check_scope(scope), query))

    @store_operation("search")
    def search(
        self,
        scope: Scope,
        *,
        vector: Vector | None = None,
        text: str | None = None,
        keywords: str | None = None,
        filter: FilterSpec | Filter | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> builtins.list[ScoredRecord]:
        """The best matches within ``scope``, best first.

        With ``vector``: cosine similarity in [-1, 1], over
        records that have a vector. With ``text``: records whose content contains
        it, case-insensitively; alone, the newest first with score 1.0. With
        both: the vector ranking among records that contain the text. With
        ``keywords`` (alone): BM25 ranking of the records sharing a term with
        them (:mod:`memcore.keywords`), scored over the scope's own records;
        records sharing none are left out.

        :raises InvalidInputError: if none of ``vector``, ``text`` and ``keywords``
            is given, or ``keywords`` with either of the others (fuse rankings in
            the caller, as :mod:`memcore.agent.recall` does).
        """
        return run_plan(self._search_plan(scope, vector, text, keywords, filter, limit))

    @store_operation("search")
    async def asearch(
        self,
        scope: Scope,
        *,
        vector: Vector | None = None,
        text: str | None = None,
        keywords: str | None = None,
        filter: FilterSpec | Filter | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> builtins.list[ScoredRecord]:
        """:meth:`search`, awaited."""
        return await self._arun(self._search_plan(scope, vector, text, keywords, filter, limit))

    def _search_plan(
        self,
        scope: Scope,
        vector: Vector | None,
        text: str | None,
        keywords: str | None,
        filter: FilterSpec | Filter | None,
        limit: int,
    ) -> Plan[builtins.list[ScoredRecord]]:
        self._check_open()
        scope = check_scope(scope)
        if keywords is not None:
            if not isinstance(keywords, str) or not keywords.strip():
                raise InvalidInputError(f"keywords must be a non-empty string, got {keywords!r}")
            if vector is not None or text is not None:
                raise InvalidInputError("keywords rank on their own: search with vector or text separately")
            ranked = KeywordQuery(keywords, parse_filter(filter), check_limit(limit, required=True))
            return (yield from self._keyword_search_with_residue(scope, ranked))
        if vector is None and text is None:
            raise InvalidInputError("search needs a vector, a text, or keywords; use list() to browse")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise InvalidInputError(f"text must be a non-empty string, got {text!r}")
        # Read once: a dimension never changes once set, so checking against this
        # value stays right even if another thread writes the first vector meanwhile.
        dimension = self._expected_dimension()
        unit = None if vector is None else normalize_rows(check_query_vector(vector, dimension))
        node = parse_filter(filter)
        bounded = check_limit(limit, required=True)
        assert bounded is not None
        if unit is not None and dimension is None:
            return []
        return (yield from self._search_with_residue(scope, SearchQuery(unit, text, node, bounded)))

    @store_operation("count")
    def count(self, scope: Scope, *, filter: FilterSpec | Filter | None = None) -> int:
        """How many records ``scope`` can see that match ``filter``."""
        return run_plan(self._count_plan(scope, filter))

    @store_operation("count")
    async def acount(self, scope: Scope, *, filter: FilterSpec | Filter | None = None) -> int:
        """:meth:`count`, awaited."""
        return await self._arun(self._count_plan(scope, filter))

    def _count_plan(self, scope: Scope, filter: FilterSpec | Filter | None) -> Plan[int]:
        self._check_open()
        scope = check_scope(scope)
        native, residue = split_filter(parse_filter(filter), self._expresses)
        if residue is None:
            return (yield from call(self._count, scope, native))
        return len((yield from self._residue_matches(scope, native, residue)))

    @store_operation("delete")
    def delete(self, scope: Scope, ids: Sequence[UUID | str]) -> int:
        """Delete the records with these ids that ``scope`` can see.

        Idempotent: ids that do not exist or that belong to another scope are
        left alone. Deleted records vanish from every read path at once.

        :returns: how many records were deleted (an id held by several exact scopes
            within ``scope`` deletes each of them).
        """
        return run_plan(self._delete_plan(scope, ids))

    @store_operation("delete")
    async def adelete(self, scope: Scope, ids: Sequence[UUID | str]) -> int:
        """:meth:`delete`, awaited."""
        return await self._arun(self._delete_plan(scope, ids), whole=True)

    def _delete_plan(self, scope: Scope, ids: Sequence[UUID | str]) -> Plan[int]:
        self._check_open()
        wanted = list(dict.fromkeys(check_ids(ids)))
        scope = check_scope(scope)
        return (yield from call(self._delete, scope, wanted)) if wanted else 0

    @store_operation("delete_where")
    def delete_where(self, scope: Scope, filter: FilterSpec | Filter) -> int:
        """Delete every record within ``scope`` that matches ``filter``.

        :param filter: a filter; ``{}`` deletes every record of the scope.
        :returns: how many records were deleted.
        """
        return run_plan(self._delete_where_plan(scope, filter))

    @store_operation("delete_where")
    async def adelete_where(self, scope: Scope, filter: FilterSpec | Filter) -> int:
        """:meth:`delete_where`, awaited."""
        return await self._arun(self._delete_where_plan(scope, filter), whole=True)

    def _delete_where_plan(self, scope: Scope, filter: FilterSpec | Filter) -> Plan[int]:
        self._check_open()
        if filter is None:
            raise InvalidInputError("delete_where needs a filter; pass {} to delete the whole scope")
        scope = check_scope(scope)
        native, residue = split_filter(parse_filter(filter), self._expresses)
        if residue is None:
            return (yield from call(self._delete_where, scope, native))
        by_scope: dict[tuple[str | None, ...], tuple[Scope, builtins.list[UUID]]] = {}
        for record in (yield from self._residue_matches(scope, native, residue)):
            by_scope.setdefault(record.scope.as_tuple(), (record.scope.exact(), []))[1].append(record.id)
        deleted = 0
        for exact, ids in by_scope.values():
            deleted += yield from call(self._delete, exact, ids)
        return deleted

    @store_operation("update")
    def update(
        self,
        scope: Scope,
        id: UUID | str,
        *,
        content: str | None = None,
        metadata: Mapping[str, MetadataValue | None] | None = None,
        ttl: TTL | _Keep | None = KEEP,
        vector: Vector | None = None,
    ) -> MemoryRecord:
        """Change part of one live record and stamp its ``updated_at``; what is not given stays.

        :param scope: a scope that sees the record (its exact scope, or one that sees no other
            record of this id).
        :param content: the new text of its message.
        :param metadata: keys to set; a key given ``None`` is removed.
        :param ttl: a new time to live from now; ``None`` makes the record never expire;
            :data:`KEEP` (default) leaves its expiry.
        :param vector: its new vector; the vector it has is kept when omitted (a memory's
            ``update`` re-embeds new content).
        :returns: the record as stored now.
        :raises RecordNotFoundError: if ``scope`` sees no live record of this id, or it is deleted
            before the change lands (an update never brings a deleted record back).
        :raises AmbiguousIdError: if ``scope`` sees records of this id in several exact scopes.
        """
        return run_plan(self._update_plan(scope, id, content, metadata, ttl, vector))

    @store_operation("update")
    async def aupdate(
        self,
        scope: Scope,
        id: UUID | str,
        *,
        content: str | None = None,
        metadata: Mapping[str, MetadataValue | None] | None = None,
        ttl: TTL | _Keep | None = KEEP,
        vector: Vector | None = None,
    ) -> MemoryRecord:
        """:meth:`update`, awaited."""
        return await self._arun(self._update_plan(scope, id, content, metadata, ttl, vector), whole=True)

    def _update_plan(
        self,
        scope: Scope,
        record_id: UUID | str,
        content: str | None,
        metadata: Mapping[str, MetadataValue | None] | None,
        ttl: TTL | _Keep | None,
        vector: Vector | None,
    ) -> Plan[MemoryRecord]:
        self._check_open()
        scope = check_scope(scope)
        [wanted] = check_ids([record_id])
        if content is not None and not isinstance(content, str):
            raise InvalidInputError(f"content must be a string, got {content!r}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a mapping, got {metadata!r}")
        changes: dict[str, Any] = {"updated_at": self.now()}
        if ttl is not KEEP:
            if not self.capabilities.expiry and ttl is not None:
                raise UnsupportedOperationError(f"the {self.name} store cannot expire records")
            changes["expires_at"] = None if ttl is None else self.expiry_after(ttl)
        given = None
        if vector is not None:
            given = normalize_rows(check_query_vector(vector, self._expected_dimension()))
        for attempt in range(_UPDATE_ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
            found = yield from call(self._get, scope, [wanted])
            if not found:
                raise RecordNotFoundError(f"no live record {wanted} in {scope}")
            if len(found) > 1:
                raise AmbiguousIdError(f"id {wanted} names records in several scopes within {scope}")
            old = found[0]
            if content is not None:
                changes["message"] = old.message.model_copy(update={"content": content})
            if metadata is not None:
                merged = {**old.metadata, **metadata}
                changes["metadata"] = {key: value for key, value in merged.items() if value is not None}
            [new] = check_records([old.model_copy(update=changes)])
            matrix = given if given is not None else (yield from self._kept_vector(old))
            if (yield from call(self._replace, old, new, matrix)):
                return new
            # Deleted, expired or changed since the read: read it again.
        raise ConflictError(f"record {wanted} kept changing during the update; try again")

    def _kept_vector(self, record: MemoryRecord) -> Plan[Matrix | None]:
        kept = yield from call(self._vectors, record.scope.exact(), [record.id])
        return kept[0][1].reshape(1, -1) if kept else None

    @store_operation("refresh")
    def refresh(self, scope: Scope, ids: Sequence[UUID | str], ttl: TTL) -> int:
        """Give these live records that expire ``ttl`` more from now (never less than they have),
        leaving ``updated_at`` and everything else as is: LangGraph's refresh on read.

        :returns: how many records now expire later than before.
        """
        return run_plan(self._refresh_plan(scope, ids, ttl))

    @store_operation("refresh")
    async def arefresh(self, scope: Scope, ids: Sequence[UUID | str], ttl: TTL) -> int:
        """:meth:`refresh`, awaited."""
        return await self._arun(self._refresh_plan(scope, ids, ttl), whole=True)

    def _refresh_plan(self, scope: Scope, ids: Sequence[UUID | str], ttl: TTL) -> Plan[int]:
        self._check_open()
        scope = check_scope(scope)
        wanted = list(dict.fromkeys(check_ids(ids)))
        expires_at = self.expiry_after(ttl)
        refreshed = 0
        for old in (yield from call(self._get, scope, wanted)) if wanted else ():
            if old.expires_at is None or old.expires_at >= expires_at:
                continue
            new = old.model_copy(update={"expires_at": expires_at})
            vector = yield from self._kept_vector(old)
            # Not written if the record changed meanwhile: that change was the newer one.
            refreshed += bool((yield from call(self._replace, old, new, vector)))
        return refreshed

    @store_operation("scopes")
    def scopes(
        self, prefix: Scope, *, depth: int | None = None, limit: int | None = None
    ) -> builtins.list[ScopeCount]:
        """The scopes under ``prefix`` that hold live records, each with how many, in scope order.

        :param prefix: what to look under; only records it can see are counted.
        :param depth: how many scope fields (tenant, user, agent, session) the answer tells
            apart: ``1`` groups by tenant, ``4`` (or ``None``) lists exact scopes (each
            :meth:`Scope.exact`, so that reading through it sees just what was counted). The fields
            ``prefix`` sets are always kept, so no answer is wider than ``prefix``.
        :param limit: at most this many scopes, the first in scope order.
        """
        return run_plan(self._scopes_plan(prefix, depth, limit))

    @store_operation("scopes")
    async def ascopes(
        self, prefix: Scope, *, depth: int | None = None, limit: int | None = None
    ) -> builtins.list[ScopeCount]:
        """:meth:`scopes`, awaited."""
        return await self._arun(self._scopes_plan(prefix, depth, limit))

    def _scopes_plan(
        self, prefix: Scope, depth: int | None, limit: int | None
    ) -> Plan[builtins.list[ScopeCount]]:
        self._check_open()
        prefix = check_scope(prefix)
        if depth is None:
            depth = len(SCOPE_FIELDS)
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= len(SCOPE_FIELDS):
            raise InvalidInputError(f"depth must be 1 to {len(SCOPE_FIELDS)}, got {depth!r}")
        if prefix.is_exact:  # an exact scope sees one scope: never group it wider
            depth = len(SCOPE_FIELDS)
        bounded = check_limit(limit, required=False)
        counts: dict[tuple[str | None, ...], int] = {}
        for exact, count in (yield from call(self._scopes, prefix)):
            key = truncated_scope(exact, prefix, depth)
            counts[key] = counts.get(key, 0) + count
        found = [ScopeCount(_scope_of(key, exact=depth == len(SCOPE_FIELDS)), n) for key, n in counts.items()]
        found.sort(key=lambda entry: scope_order(entry.scope))
        return found[:bounded]

    @store_operation("purge")
    def purge(self) -> None:
        """Physically erase deleted and expired records from everything the store persists.

        Expired records are deleted first (:meth:`sweep`); stores that keep nothing on disk have
        nothing more to erase.
        """
        self.sweep()
        self._purge()

    @store_operation("sweep")
    def sweep(self) -> int:
        """Delete every record expired by :meth:`now`, in every scope, as :meth:`delete` would.

        :returns: how many records were deleted.
        """
        self._check_open()
        if not self.capabilities.expiry:
            return 0
        return self._delete_where(Scope.everything(), Comparison("expires_at", "$lte", self.now()))

    async def asweep(self) -> int:
        """:meth:`sweep`, on the store's workers."""
        return await self.run_in_worker(self.sweep)

    def _purge(self) -> None:  # noqa: B027 - a hook with nothing to do by default, not abstract
        """Erase what deletes left on disk (see :meth:`purge`); the default has nothing to erase."""

    async def apurge(self) -> None:
        """:meth:`purge`, on the store's workers."""
        await self.run_in_worker(self.purge)

    def vector_space(self) -> VectorSpace | None:
        """The embedder the store's vectors come from, once :meth:`bind_vector_space` was called."""
        self._check_open()
        return self._load_vector_space()

    async def avector_space(self) -> VectorSpace | None:
        """:meth:`vector_space`, on the store's workers."""
        return await self.run_in_worker(self.vector_space)

    def bind_vector_space(self, space: VectorSpace) -> None:
        """Record which embedder the store's vectors come from, or check that it is the same.

        Memories call this with their embedder, so that vectors of two embedders
        are never mixed in one store (their similarities would be meaningless).
        Durable stores persist the binding.

        :raises EmbedderMismatchError: if the store is bound to another embedder,
            or already holds vectors of another dimension.
        """
        self._check_open()
        if not isinstance(space.dimension, int) or space.dimension < 1 or not space.embedder:
            raise InvalidInputError(f"invalid vector space {space!r}")
        with self._state_lock:
            current = self._load_vector_space()
            if current == space:
                return
            if current is not None:
                raise EmbedderMismatchError(
                    f"the {self.name} store holds vectors of the embedder {current.embedder!r} "
                    f"({current.dimension} dimensions), not {space.embedder!r} ({space.dimension}); "
                    "use a store of its own for another embedder, or migrate and re-embed"
                )
            if self.dimension is not None and self.dimension != space.dimension:
                raise EmbedderMismatchError(
                    f"the {self.name} store holds {self.dimension}-dimensional vectors; "
                    f"the embedder {space.embedder!r} makes {space.dimension}"
                )
            self._save_vector_space(space)

    async def abind_vector_space(self, space: VectorSpace) -> None:
        """:meth:`bind_vector_space`, on the store's workers."""
        await self.run_in_worker(self.bind_vector_space, space)

    def close(self) -> None:
        """Release the store. Idempotent; any other call afterwards raises StoreClosedError.

        Calls the async API has already handed to the store's workers finish first (those
        still waiting for a worker raise StoreClosedError). In a forked child that never
        reconnected, nothing is released: it is the parent's.
        """
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        with self._workers_lock:  # a pool made after this read would outlive the store
            workers = self._workers
        if workers is not None:
            workers.shutdown()
        if self._process == os.getpid():
            self._close()

    async def aclose(self) -> None:
        """:meth:`close`, awaited: waits for the calls in flight without blocking the loop (those
        on this loop's native client too, which :meth:`close` cannot wait for)."""
        loop = asyncio.get_running_loop()
        in_flight = [run for run in list(self._native_runs) if run.get_loop() is loop]
        if in_flight:
            await asyncio.wait(in_flight)
        await asyncio.to_thread(self.close)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _expected_dimension(self) -> int | None:
        if self.dimension is not None:
            return self.dimension
        space = self._load_vector_space()
        return None if space is None else space.dimension

    def _closed_error(self) -> StoreClosedError:
        return StoreClosedError(f"the {self.name} store is closed")

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()
        if self._process != os.getpid():
            self._follow_fork()

    def _follow_fork(self) -> None:
        with _fork_lock:
            if self._process == os.getpid():
                return
            self._reconnect_in_child()
            self._process = os.getpid()

    def _reconnect_in_child(self) -> None:
        """Make this object usable in a process forked from the one that opened it.

        Called once, before the child's first call. Server stores override it to open
        new connections, dropping the inherited ones without closing them (closing
        would end the parent's sessions too). The default refuses.

        :raises StoreForkedError: if the store cannot be used from a forked child.
        """
        raise StoreForkedError(
            f"this {self.name} store was opened by process {self._process}, which this process "
            f"({os.getpid()}) was forked from; open the store again in this process (for gunicorn "
            "--preload or celery prefork, in a post-fork hook)"
        )

    def _load_vector_space(self) -> VectorSpace | None:
        """The bound vector space; durable stores override both methods to persist it."""
        return self._bound_space

    def _save_vector_space(self, space: VectorSpace) -> None:
        self._bound_space = space

    # -- the exact fallback: what a backend does not express natively, evaluated here ------------

    def _expresses(self, comparison: Comparison) -> bool:
        """Whether the backend's ``_list``, ``_search``, ``_count`` and ``_delete_where`` evaluate
        ``comparison`` exactly as :func:`memcore.filters.evaluate` does.

        The default, ``True``, suits a backend that evaluates filters with the reference
        evaluator. A backend that compiles filters into its engine's query language answers
        from its compiler (an operator it has no translation for, a value its engine
        compares inexactly): those clauses never reach its hooks; :class:`BaseStore`
        pushes the rest of the filter down and evaluates them on what comes back.
        """
        return True

    def _residue_matches(
        self, scope: Scope, native: Filter | None, residue: Filter
    ) -> Plan[builtins.list[MemoryRecord]]:
        """Every record of ``scope`` matching ``native`` in the engine and ``residue`` here."""
        records = yield from call(self._list, scope, ListQuery(native))
        return [r for r in records if evaluate(residue, r)]

    def _list_with_residue(self, scope: Scope, query: ListQuery) -> Plan[builtins.list[MemoryRecord]]:
        # The time bounds are comparisons on created_at too: one the backend declines (a time
        # its engine compares inexactly) joins the residue.
        declined = [bound for bound in query.time_bounds() if not self._expresses(bound)]
        native, residue = split_filter(conjunction([query.filter, *declined]), self._expresses)
        if residue is None:
            return (yield from call(self._list, scope, query))
        pushed = query.without_time_bounds(declined).with_filter(native, limit=None)
        matching = (r for r in (yield from call(self._list, scope, pushed)) if evaluate(residue, r))
        return builtins.list(itertools.islice(matching, query.limit))

    def _search_with_residue(self, scope: Scope, query: SearchQuery) -> Plan[builtins.list[ScoredRecord]]:
        native, residue = split_filter(query.filter, self._expresses)
        if residue is None:
            return (yield from call(self._search, scope, query))
        # A ranking with some hits left out keeps its order: fetch more of it until ``limit``
        # hits pass, or the engine has no more to give.
        fetch = max(query.limit * _OVERFETCH, _MIN_FETCH)
        while True:
            hits = yield from call(self._search, scope, query.with_filter(native, limit=fetch))
            passing = [hit for hit in hits if evaluate(residue, hit.record)]
            if len(passing) >= query.limit or len(hits) < fetch:
                return passing[: query.limit]
            fetch *= _OVERFETCH

    def _keyword_search_with_residue(
        self, scope: Scope, query: KeywordQuery
    ) -> Plan[builtins.list[ScoredRecord]]:
        native, residue = split_filter(query.filter, self._expresses)
        if residue is None:
            return (yield from call(self._keyword_search, scope, query))
        return rank_by_keywords(query, (yield from self._residue_matches(scope, native, residue)))

    # -- the async API: plans run on the store's workers, or natively -----------------------------

    def _worker_count(self) -> int:
        """How many calls the engine serves at once: the size of the pool the async API runs
        blocking work on. One for an embedded engine (behind one lock, more threads would only
        contend for it and the GIL); :data:`SERVER_WORKERS` for a server; a store with a
        connection pool returns the pool's size."""
        return SERVER_WORKERS if self.capabilities.server else 1

    def _worker_pool(self) -> WorkerPool:
        workers = self._workers
        if workers is not None:
            return workers  # after close() it is shut down, and its calls raise StoreClosedError
        with self._workers_lock:  # not _state_lock: bind_vector_space holds that during I/O
            if self._closed:
                raise self._closed_error()
            if self._workers is None:
                self._workers = WorkerPool(self._worker_count(), self.name, closed_error=self._closed_error)
            return self._workers

    async def run_in_worker(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking code that uses this store on the store's workers, off the event loop.

        The async methods of memories and sessions use it: their logic runs where the
        store's own blocking calls run, so that a loop serving many agents never waits for
        the engine and never makes more threads than the engine serves.

        :raises StoreClosedError: if the store is closed.
        """
        if self._closed:
            raise self._closed_error()
        return await self._worker_pool().run(fn, *args, **kwargs)

    async def _arun(self, plan: Plan[R], *, whole: bool = False) -> R:
        """Run ``plan`` for an async twin: on the workers, awaiting on the loop the hooks the
        backend has async variants of. A write (``whole``) that may call several hooks is then
        shielded from the caller's cancellation, so that a timeout never leaves it half done
        (a loop closed meanwhile still cancels it)."""
        if not type(self)._native_hooks or not self._native_on_this_loop():
            return await self.run_in_worker(run_plan, plan)
        running = asyncio.ensure_future(arun_plan(plan, self, self._worker_pool()))
        self._native_runs.add(running)
        running.add_done_callback(self._native_runs.discard)
        if not whole:
            return await running
        running.add_done_callback(_retrieve_outcome)
        return await asyncio.shield(running)

    def _native_on_this_loop(self) -> bool:
        """Whether the running event loop may await the hooks' async variants. A backend whose
        async client belongs to one loop answers ``False`` on the others: their calls then run
        wholly on the workers, with the same results."""
        return True

    _native_hooks: ClassVar[frozenset[str]] = frozenset()
    """The hooks with an async variant (``_alist`` for ``_list``), found when the class is defined
    (by name: a decorator on a hook must keep its ``__name__``, as :func:`functools.wraps` does)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._native_hooks = frozenset(
            hook for hook in _HOOKS if callable(getattr(cls, "_a" + hook.removeprefix("_"), None))
        )

    # -- the hooks a backend implements -------------------------------------------------------

    @abstractmethod
    def _add(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None:
        """Upsert ``records`` (checked), with ``vectors`` (unit rows, checked against :attr:`dimension`
        before the call; a backend re-checks under its own lock, with
        :func:`memcore.kit.check_same_dimension`)."""

    @abstractmethod
    def _get(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]:
        """The records of ``ids`` (distinct) within ``scope``, in any order."""

    def _vectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        """Each vector-bearing record of ``ids`` within ``scope``, as ``(id, unit vector)``;
        an id in several exact scopes appears once per record."""
        # Not abstract: plugins written before vectors() existed keep working for everything else.
        raise UnsupportedOperationError(f"the {self.name} store cannot read vectors back (no _vectors hook)")

    @abstractmethod
    def _list(self, scope: Scope, query: ListQuery) -> builtins.list[MemoryRecord]:
        """The records of ``scope`` that ``query`` selects, in its order, at most its limit."""

    @abstractmethod
    def _search(self, scope: Scope, query: SearchQuery) -> builtins.list[ScoredRecord]:
        """The best ``query.limit`` hits of ``scope``: by cosine similarity (scores in [-1, 1]) among
        records with a vector when ``query.vector`` is set, else newest first with score 1.0."""

    @abstractmethod
    def _count(self, scope: Scope, node: Filter | None) -> int:
        """How many records of ``scope`` match ``node``."""

    def _keyword_search(self, scope: Scope, query: KeywordQuery) -> builtins.list[ScoredRecord]:
        """BM25 over every record ``scope`` can see that matches the query's filter: an exact scan.

        A backend whose engine ranks keywords natively overrides this.
        """
        return rank_by_keywords(query, self._list(scope, ListQuery(query.filter)))

    @abstractmethod
    def _delete(self, scope: Scope, ids: builtins.list[UUID]) -> int:
        """Delete the records of ``ids`` within ``scope``; how many there were."""

    @abstractmethod
    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        """Delete the records of ``scope`` matching ``node``; how many there were."""

    def _replace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        """Write ``new`` (same scope and id as ``old``) with ``vector``, only if the stored record is
        still live and still ``old``; whether it was written (``update`` reads the record again
        when not). A backend makes the check and the write one step (a lock, a conditional
        write); one that can only check that the record is live says where it falls short. This
        default checks, then writes, and so leaves a window in which a concurrent delete is undone."""
        if self._get(old.scope.exact(), [old.id]) != [old]:
            return False
        self._add([new], vector)
        return True

    def _scopes(self, prefix: Scope) -> builtins.list[tuple[Scope, int]]:
        """The exact scopes of the live records ``prefix`` sees, each with its count (a scope may
        appear more than once: counts are summed). This default reads every record: a backend
        with a grouped query or an index overrides it."""
        counts: dict[tuple[str | None, ...], tuple[Scope, int]] = {}
        for record in self._list(prefix, ListQuery()):
            key = record.scope.as_tuple()
            scope, count = counts.get(key, (record.scope, 0))
            counts[key] = (scope, count + 1)
        return builtins.list(counts.values())

    @abstractmethod
    def _close(self) -> None:
        """Release the engine (called once, in the process that opened the store)."""


Store: TypeAlias = BaseStore
"""What memories and tools program against: any :class:`BaseStore`."""


def _scope_of(fields: tuple[str | None, ...], *, exact: bool) -> Scope:
    # Built from stored values, not validated again (a record stored before every scope had a
    # tenant has none).
    scope = Scope.model_construct(None, **dict(zip(SCOPE_FIELDS, fields, strict=True)))
    return scope.exact() if exact else scope


def truncated_scope(exact: Scope, prefix: Scope, depth: int) -> tuple[str | None, ...]:
    """The fields of ``exact`` that :meth:`BaseStore.scopes` tells apart at ``depth``: the first
    ``depth`` fields, and every field ``prefix`` sets."""
    return tuple(
        value if index < depth or given is not None else None
        for index, (value, given) in enumerate(zip(exact.as_tuple(), prefix.as_tuple(), strict=True))
    )


def rank_by_keywords(query: KeywordQuery, records: Sequence[MemoryRecord]) -> builtins.list[ScoredRecord]:
    """``records`` ranked by BM25 against ``query.keywords``, best first, newest first among equals.

    :param records: the candidates, newest first (any order: they are sorted here).
    """
    newest_first = sorted(records, key=order_key, reverse=True)
    scores = bm25_scores(query.keywords, [record.message.content for record in newest_first])
    ranked = sorted((i for i, score in enumerate(scores) if score > 0), key=lambda i: -scores[i])
    return [ScoredRecord.of(newest_first[i], scores[i]) for i in ranked[: query.limit]]
