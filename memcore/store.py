"""The storage contract every backend implements, and a base class that enforces it.

A store keeps :class:`~memcore.records.MemoryRecord` objects, optionally with a
vector each, and answers reads that are always scoped. A record is its exact
scope plus its id: two scopes may hold records with the same id, and neither
can tell, overwrite or block the other's (a wide scope's ``get`` sees both). :class:`Store` is the
protocol callers program against; :class:`BaseStore` is the class backends
subclass: it validates every argument the same way for all backends (see
:mod:`memcore.validation`), refuses calls after :meth:`~BaseStore.close`, and
hands the backend clean, parsed input through a small set of ``_methods``.
"""

from __future__ import annotations

import builtins
import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import ClassVar, Literal, Protocol, Self, runtime_checkable
from uuid import UUID

from memcore.errors import (
    AmbiguousIdError,
    EmbedderMismatchError,
    InvalidInputError,
    StoreClosedError,
    StoreForkedError,
    UnsupportedOperationError,
)
from memcore.filters import Filter, FilterSpec, parse_filter
from memcore.keywords import bm25_scores
from memcore.records import MemoryRecord, ScoredRecord, in_utc
from memcore.scope import Scope, scope_order
from memcore.validation import (
    DEFAULT_LIMIT,
    Matrix,
    Vector,
    Vectors,
    check_ids,
    check_limit,
    check_query_vector,
    check_records,
    check_scope,
    check_vectors,
    normalize_rows,
)

Order = Literal["asc", "desc"]


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
    :param default_recall: what a memory's ``recall="auto"`` means over this store:
        ``"hybrid"`` where keyword search and the small ordered reads of hybrid recall's
        neighbours are cheap enough for every turn (``memcore bench``'s agent loop), else
        ``"dense"``.
    """

    durable: bool
    ann: bool = False
    text_search: bool = True
    server: bool = False
    keyword_index: bool = False
    default_recall: Literal["dense", "hybrid"] = "dense"


@dataclass(frozen=True)
class VectorSpace:
    """Where a store's vectors come from: the embedder's name and its dimension."""

    embedder: str
    dimension: int


@runtime_checkable
class Store(Protocol):
    """What memories and tools need from a storage backend.

    Every read and delete takes a :class:`~memcore.scope.Scope` and returns or
    touches only records within it. A record is its exact scope plus its UUID id;
    ``add`` upserts the record of the same scope and id.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @property
    def dimension(self) -> int | None:
        """The vector dimension, fixed by the first vector written (``None`` before)."""
        ...

    def add(self, records: Sequence[MemoryRecord], vectors: Vectors | None = None) -> None:
        """Insert or replace records (by exact scope and id), each with its vector if ``vectors`` is given."""
        ...

    def get(self, scope: Scope, ids: Sequence[UUID | str]) -> builtins.list[MemoryRecord]:
        """The records with these ids that ``scope`` can see, in the order asked (an id held
        by several exact scopes within ``scope`` gives each of those records)."""
        ...

    def vectors(self, scope: Scope, ids: Sequence[UUID | str]) -> dict[UUID, Matrix]:
        """The unit vectors of the records with these ids that ``scope`` can see and that have one;
        :class:`~memcore.errors.AmbiguousIdError` if an id names records of several exact scopes."""
        ...

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
        """Records in ``created_at`` order (then id), optionally filtered and bounded."""
        ...

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
        """The best matches by cosine similarity and/or case-insensitive text match, or by BM25 keywords."""
        ...

    def count(self, scope: Scope, *, filter: FilterSpec | Filter | None = None) -> int:
        """How many records ``scope`` can see that match ``filter``."""
        ...

    def delete(self, scope: Scope, ids: Sequence[UUID | str]) -> int:
        """Delete these records if ``scope`` can see them; return how many existed."""
        ...

    def delete_where(self, scope: Scope, filter: FilterSpec | Filter) -> int:
        """Delete every record in ``scope`` matching ``filter`` (``{}``: all of them)."""
        ...

    def purge(self) -> None:
        """Physically erase deleted records from everything the store persists."""
        ...

    def vector_space(self) -> VectorSpace | None:
        """The embedder the store's vectors come from, once one was bound."""
        ...

    def bind_vector_space(self, space: VectorSpace) -> None:
        """Record the embedder of the store's vectors; refuse a different one."""
        ...

    def close(self) -> None:
        """Release the store; later calls raise :class:`~memcore.errors.StoreClosedError`."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


_open_stores: weakref.WeakSet[BaseStore] = weakref.WeakSet()
_fork_lock = threading.Lock()


def _reset_locks_after_fork() -> None:
    """In a forked child: a parent thread may have held these locks at the fork; they would never
    be released here."""
    global _fork_lock
    _fork_lock = threading.Lock()
    for store in list(_open_stores):
        store._state_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_locks_after_fork)


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

    def __init__(self) -> None:
        self._closed = False
        self._state_lock = threading.Lock()
        self._bound_space: VectorSpace | None = None
        self._process = os.getpid()
        _open_stores.add(self)

    @classmethod
    @abstractmethod
    def from_url(cls, url: str) -> Self:
        """Open the store that ``url`` (one of :attr:`schemes`) names."""

    @property
    @abstractmethod
    def dimension(self) -> int | None:
        """The vector dimension, fixed by the first vector written (``None`` before)."""

    def add(self, records: Sequence[MemoryRecord], vectors: Vectors | None = None) -> None:
        """Insert or replace records, each with its vector when ``vectors`` is given.

        A record is replaced by one with the same id *and the same scope*; the same id
        in another scope is another record, so a writer learns nothing about, and
        cannot block, the ids other scopes use. Replacing a record replaces its
        vector too (none if ``vectors`` is omitted).

        :raises InvalidRecordError: for invalid or oversized records.
        :raises InvalidVectorError: for invalid vectors (NaN, infinity, zero, empty).
        :raises DimensionMismatchError: if a vector does not match :attr:`dimension`.
        """
        self._check_open()
        batch = check_records(records)
        matrix = None
        if vectors is not None:
            matrix = normalize_rows(check_vectors(vectors, len(batch), self._expected_dimension()))
        if batch:
            self._add(batch, matrix)

    def get(self, scope: Scope, ids: Sequence[UUID | str]) -> builtins.list[MemoryRecord]:
        """The records with these ids that ``scope`` can see, in the order asked.

        Ids that do not exist, or belong to another scope, are simply absent. An id
        that names records in several exact scopes within ``scope`` gives each of
        them, ordered by scope (tenant, user, agent, session; unset first).
        """
        self._check_open()
        wanted = list(dict.fromkeys(check_ids(ids)))
        if not wanted:
            return []
        found: dict[UUID, builtins.list[MemoryRecord]] = {}
        for record in sorted(self._get(check_scope(scope), wanted), key=lambda r: scope_order(r.scope)):
            found.setdefault(record.id, []).append(record)
        return [record for record_id in wanted for record in found.get(record_id, ())]

    def vectors(self, scope: Scope, ids: Sequence[UUID | str]) -> dict[UUID, Matrix]:
        """The vectors of the records with these ids that ``scope`` can see, as the store keeps
        them: unit length, float32, one row each. Records without a vector, in another scope
        or absent are left out. For export and migration, and for re-ranking by vector.

        :raises AmbiguousIdError: if an id names records in several exact scopes within
            ``scope``; ask each record's ``scope.exact()``.
        """
        self._check_open()
        wanted = list(dict.fromkeys(check_ids(ids)))
        found: dict[UUID, Matrix] = {}
        for record_id, vector in self._vectors(check_scope(scope), wanted) if wanted else ():
            if record_id in found:
                raise AmbiguousIdError(
                    f"id {record_id} names records in several scopes within {scope}; "
                    "read each record's vector through its exact scope"
                )
            found[record_id] = vector
        return found

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
        self._check_open()
        if order not in ("asc", "desc"):
            raise InvalidInputError(f"order must be 'asc' or 'desc', got {order!r}")
        return self._list(
            check_scope(scope),
            parse_filter(filter),
            order,
            check_limit(limit, required=False),
            _check_datetime("before", before),
            _check_datetime("after", after),
        )

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
            the caller, as :mod:`memcore.recall` does).
        """
        self._check_open()
        scope = check_scope(scope)
        if keywords is not None:
            if not isinstance(keywords, str) or not keywords.strip():
                raise InvalidInputError(f"keywords must be a non-empty string, got {keywords!r}")
            if vector is not None or text is not None:
                raise InvalidInputError("keywords rank on their own: search with vector or text separately")
            return self._keyword_search(
                scope, keywords, parse_filter(filter), check_limit(limit, required=True)
            )
        if vector is None and text is None:
            raise InvalidInputError("search needs a vector, a text, or keywords; use list() to browse")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise InvalidInputError(f"text must be a non-empty string, got {text!r}")
        # Read once: a dimension never changes once set, so checking against this
        # value stays right even if another thread writes the first vector meanwhile.
        dimension = self._expected_dimension()
        query = None if vector is None else normalize_rows(check_query_vector(vector, dimension))
        node = parse_filter(filter)
        bounded = check_limit(limit, required=True)
        assert bounded is not None
        if query is not None and dimension is None:
            return []
        return self._search(scope, query, text, node, bounded)

    def count(self, scope: Scope, *, filter: FilterSpec | Filter | None = None) -> int:
        """How many records ``scope`` can see that match ``filter``."""
        self._check_open()
        return self._count(check_scope(scope), parse_filter(filter))

    def delete(self, scope: Scope, ids: Sequence[UUID | str]) -> int:
        """Delete the records with these ids that ``scope`` can see.

        Idempotent: ids that do not exist or that belong to another scope are
        left alone. Deleted records vanish from every read path at once.

        :returns: how many records were deleted (an id held by several exact scopes
            within ``scope`` deletes each of them).
        """
        self._check_open()
        wanted = list(dict.fromkeys(check_ids(ids)))
        return self._delete(check_scope(scope), wanted) if wanted else 0

    def delete_where(self, scope: Scope, filter: FilterSpec | Filter) -> int:
        """Delete every record within ``scope`` that matches ``filter``.

        :param filter: a filter; ``{}`` deletes every record of the scope.
        :returns: how many records were deleted.
        """
        self._check_open()
        if filter is None:
            raise InvalidInputError("delete_where needs a filter; pass {} to delete the whole scope")
        return self._delete_where(check_scope(scope), parse_filter(filter))

    def purge(self) -> None:
        """Physically erase deleted records from everything the store persists.

        Stores that keep nothing on disk have nothing to erase.
        """
        self._check_open()

    def vector_space(self) -> VectorSpace | None:
        """The embedder the store's vectors come from, once :meth:`bind_vector_space` was called."""
        self._check_open()
        return self._load_vector_space()

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

    def close(self) -> None:
        """Release the store. Idempotent; any other call afterwards raises StoreClosedError.

        In a forked child that never reconnected, nothing is released: it is the parent's.
        """
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        if self._process == os.getpid():
            self._close()

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

    def _expected_dimension(self) -> int | None:
        if self.dimension is not None:
            return self.dimension
        space = self._load_vector_space()
        return None if space is None else space.dimension

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the {self.name} store is closed")
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

    @abstractmethod
    def _add(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None: ...

    @abstractmethod
    def _get(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]: ...

    def _vectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        """Each vector-bearing record of ``ids`` within ``scope``, as ``(id, unit vector)``;
        an id in several exact scopes appears once per record."""
        # Not abstract: plugins written before vectors() existed keep working for everything else.
        raise UnsupportedOperationError(f"the {self.name} store cannot read vectors back (no _vectors hook)")

    @abstractmethod
    def _list(
        self,
        scope: Scope,
        node: Filter | None,
        order: Order,
        limit: int | None,
        before: datetime | None,
        after: datetime | None,
    ) -> builtins.list[MemoryRecord]: ...

    @abstractmethod
    def _search(
        self, scope: Scope, query: Matrix | None, text: str | None, node: Filter | None, limit: int
    ) -> builtins.list[ScoredRecord]: ...

    @abstractmethod
    def _count(self, scope: Scope, node: Filter | None) -> int: ...

    def _keyword_search(
        self, scope: Scope, keywords: str, node: Filter | None, limit: int | None
    ) -> builtins.list[ScoredRecord]:
        """BM25 over every record ``scope`` can see that matches ``node``: the exact fallback.

        A backend whose engine ranks keywords natively overrides this.
        """
        records = self._list(scope, node, "desc", None, None, None)
        scores = bm25_scores(keywords, [record.message.content for record in records])
        ranked = sorted((i for i, score in enumerate(scores) if score > 0), key=lambda i: -scores[i])
        return [ScoredRecord.of(records[i], scores[i]) for i in ranked[:limit]]

    @abstractmethod
    def _delete(self, scope: Scope, ids: builtins.list[UUID]) -> int: ...

    @abstractmethod
    def _delete_where(self, scope: Scope, node: Filter | None) -> int: ...

    @abstractmethod
    def _close(self) -> None: ...
