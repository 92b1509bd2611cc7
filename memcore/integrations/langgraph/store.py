"""The LangGraph ``BaseStore`` over a memcore store (see :mod:`memcore.integrations.langgraph`).

Each batch is written once, as a plan: a generator that yields the memcore calls it needs
(:class:`_StoreCall`, :class:`_EmbedCall`) and receives their results. A batch reads, embeds
and checks everything it will write (:class:`_Writes`) before its first write, so a batch
refused for any of its operations changes nothing. :meth:`batch` runs it
with the store's and the embedder's sync API, :meth:`abatch` with their async twins (``aget``,
``alist``, ``asearch``, ``aadd``, ``adelete``, ``arefresh``; ``aembed_documents`` or
``aembed``), so the async path awaits memcore's async API instead of wrapping ``batch`` in a
thread.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar
from uuid import UUID

import numpy as np
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    NamespacePath,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from memcore.embedders.base import Embedder
from memcore.errors import InvalidInputError, InvalidLimitError, UnsupportedOperationError
from memcore.filters import FilterSpec
from memcore.integrations.langgraph import filters
from memcore.integrations.langgraph.embedding import ItemEmbedding, item_embedding
from memcore.integrations.langgraph.layout import (
    MAX_NAMESPACE_DEPTH,
    Layout,
    check_item_namespace,
    check_key,
    check_labels,
    encode_value,
)
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.store import Store
from memcore.validation import MAX_LIMIT, Matrix, check_records, check_vectors

T = TypeVar("T")
_TICK = timedelta(microseconds=1)  # the resolution of created_at
_MIN_PAGE = 64


@dataclass(frozen=True)
class _StoreCall:
    """A call of the memcore store's method ``name`` (``a{name}`` on the async path)."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _EmbedCall:
    texts: list[str]
    query: bool


_Plan = Generator[_StoreCall | _EmbedCall, Any, T]


def _call(name: str, *args: Any, **kwargs: Any) -> _Plan[Any]:
    return (yield _StoreCall(name, args, kwargs))


@dataclass
class _Writes:
    """What a batch writes, checked: records with their vectors, records without, and the ids
    of the items to delete, by exact scope."""

    embedded: list[MemoryRecord] = field(default_factory=list)
    vectors: Matrix | None = None
    plain: list[MemoryRecord] = field(default_factory=list)
    deletes: dict[tuple[str | None, ...], tuple[Scope, list[UUID]]] = field(default_factory=dict)


@dataclass
class _Refreshes:
    """Items a read returned whose time to live it renews: ``(exact scope, ttl minutes) -> ids``."""

    due: dict[tuple[tuple[str | None, ...], float], tuple[Scope, list[UUID]]] = field(default_factory=dict)

    def add(self, record: MemoryRecord, minutes: float | None) -> None:
        if minutes is not None:
            key = (record.scope.as_tuple(), minutes)
            self.due.setdefault(key, (record.scope.exact(), []))[1].append(record.id)


class MemcoreLangGraphStore(BaseStore):
    """A LangGraph store whose items are records of a memcore store, within one scope.

    :param store: any memcore store (``open_store(url)``); not closed by this object.
    :param scope: the deployment's scope: every item lives in it (or below it, with
        ``namespace_scope``) and every read and delete stays there.
    :param index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``) for vector search.
    :param embedder: a memcore embedder instead of ``index["embed"]`` (``index`` may then give
        ``fields`` only).
    :param ttl: LangGraph's ``TTLConfig`` (``default_ttl``, ``refresh_on_read``, in minutes).
    :param namespace_scope: scope fields that the leading namespace labels fill, such as
        ``("user_id",)``: items of namespace ``("alice", ...)`` then live in alice's scope.
    :param embedder_name: the vector-space name the store is bound to, instead of the one
        derived from the embeddings.
    :raises ScopeError: for a scope without tenant, or a mapping of fields the scope sets.
    :raises UnsupportedOperationError: for ``ttl`` on a store that cannot expire records.
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        *,
        index: IndexConfig | None = None,
        embedder: Embedder | None = None,
        ttl: TTLConfig | None = None,
        namespace_scope: Iterable[str] = (),
        embedder_name: str | None = None,
    ) -> None:
        self.store = store
        self.layout = Layout(scope, tuple(namespace_scope))
        self.index_config = index
        self._embedding: ItemEmbedding | None = item_embedding(index, embedder, embedder_name)
        self._bound = False
        self.supports_ttl = store.capabilities.expiry
        if ttl is not None and not self.supports_ttl:
            raise UnsupportedOperationError(f"the {store.name} store cannot expire records: no TTLConfig")
        self.ttl_config = ttl

    @property
    def scope(self) -> Scope:
        """The deployment's scope."""
        return self.layout.deployment

    # -- LangGraph's entry points: typed checks first, then BaseStore's own ------------------

    def get(self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """The item, or ``None`` (see ``langgraph.store.base.BaseStore.get``)."""
        check_labels(namespace)
        return super().get(namespace, key, refresh_ttl=refresh_ttl)

    async def aget(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        """:meth:`get`, through memcore's async API."""
        check_labels(namespace)
        return await super().aget(namespace, key, refresh_ttl=refresh_ttl)

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        """Items under ``namespace_prefix``: by similarity to ``query`` (cosine, in [-1, 1]),
        else the most recently updated first; ``filter`` as LangGraph's ``InMemoryStore``."""
        check_labels(namespace_prefix)
        return super().search(
            namespace_prefix, query=query, filter=filter, limit=limit, offset=offset, refresh_ttl=refresh_ttl
        )

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        """:meth:`search`, through memcore's async API."""
        check_labels(namespace_prefix)
        return await super().asearch(
            namespace_prefix, query=query, filter=filter, limit=limit, offset=offset, refresh_ttl=refresh_ttl
        )

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Store or replace the item (``ttl`` in minutes; ``index`` as in LangGraph)."""
        self._check_put(namespace, ttl)
        super().put(namespace, key, value, index, ttl=ttl)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """:meth:`put`, through memcore's async API."""
        self._check_put(namespace, ttl)
        await super().aput(namespace, key, value, index, ttl=ttl)

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        """Delete the item's record from the store (every read path at once)."""
        check_labels(namespace)
        super().delete(namespace, key)

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        """:meth:`delete`, through memcore's async API."""
        check_labels(namespace)
        await super().adelete(namespace, key)

    def list_namespaces(
        self,
        *,
        prefix: NamespacePath | None = None,
        suffix: NamespacePath | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The namespaces holding items, sorted, as LangGraph's ``InMemoryStore`` lists them."""
        check_labels(prefix or ())
        check_labels(suffix or ())
        return super().list_namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )

    async def alist_namespaces(
        self,
        *,
        prefix: NamespacePath | None = None,
        suffix: NamespacePath | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """:meth:`list_namespaces`, through memcore's async API."""
        check_labels(prefix or ())
        check_labels(suffix or ())
        return await super().alist_namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )

    def sweep_ttl(self) -> int:
        """Delete expired records now (memcore's ``store.sweep()``, over the whole store).

        Expired items are never returned anyway: every memcore read hides them natively.
        :returns: how many records were deleted.
        """
        return self.store.sweep()

    async def asweep_ttl(self) -> int:
        """:meth:`sweep_ttl`, on the store's workers."""
        return await self.store.asweep()

    def _check_put(self, namespace: tuple[str, ...], ttl: float | NotProvided | None) -> None:
        check_item_namespace(namespace)
        if ttl not in (NOT_PROVIDED, None) and not self.supports_ttl:
            raise UnsupportedOperationError(
                f"the {self.store.name} store cannot expire records: put without ttl"
            )

    # -- batches ----------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` with memcore's sync API: the reads first, on the store as it was, then the
        writes (the last write of an item wins), as LangGraph's stores do."""
        plan = self._batch(list(ops))
        try:
            step = next(plan)
            while True:
                if isinstance(step, _EmbedCall):
                    assert self._embedding is not None
                    result: Any = self._embedding.embed_sync(step.texts, step.query)
                else:
                    result = getattr(self.store, step.name)(*step.args, **step.kwargs)
                step = plan.send(result)
        except StopIteration as done:
            results: list[Result] = done.value
            return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` with memcore's async API (and the embeddings' async API)."""
        plan = self._batch(list(ops))
        try:
            step = next(plan)
            while True:
                if isinstance(step, _EmbedCall):
                    assert self._embedding is not None
                    result: Any = await self._embedding.embed_async(step.texts, step.query)
                else:
                    result = await getattr(self.store, f"a{step.name}")(*step.args, **step.kwargs)
                step = plan.send(result)
        except StopIteration as done:
            results: list[Result] = done.value
            return results

    def _batch(self, ops: list[Op]) -> _Plan[list[Result]]:
        for op in ops:
            self._check_op(op)
        results: list[Result] = [None] * len(ops)
        refreshes = _Refreshes()
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        if gets:
            yield from self._get(gets, results, refreshes)
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                results[i] = yield from self._search(op, refreshes)
            elif isinstance(op, ListNamespacesOp):
                results[i] = yield from self._list_namespaces(op)
        puts = {(tuple(op.namespace), op.key): op for op in ops if isinstance(op, PutOp)}
        writes = (yield from self._prepare(list(puts.values()))) if puts else _Writes()
        for (_, minutes), (scope, ids) in refreshes.due.items():
            yield from _call("refresh", scope, ids, minutes * 60)
        for records, vectors in ((writes.embedded, writes.vectors), (writes.plain, None)):
            if records:
                yield from _call("add", records, vectors)
        for scope, ids in writes.deletes.values():
            yield from _call("delete", scope, ids)
        return results

    def _check_op(self, op: Op) -> None:
        """What about ``op`` can be refused before anything is read. A put's value is encoded (and
        refused) once, where its record is built (:meth:`_prepare`): still before any write."""
        if isinstance(op, GetOp):
            check_labels(op.namespace)
            check_key(op.key)
        elif isinstance(op, SearchOp):
            check_labels(op.namespace_prefix)
            filters.check_filter(op.filter)
            _check_page(op.limit, op.offset)
            if op.query is not None and not isinstance(op.query, str):
                raise InvalidInputError(f"a search query is a string, got {op.query!r}")
        elif isinstance(op, ListNamespacesOp):
            for condition in op.match_conditions or ():
                if condition.match_type not in ("prefix", "suffix"):
                    raise InvalidInputError(
                        f"match_type is 'prefix' or 'suffix', got {condition.match_type!r}"
                    )
                check_labels(condition.path)
            _check_page(op.limit, op.offset)
            depth = op.max_depth
            if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
                raise InvalidInputError(f"max_depth is a positive integer, got {depth!r}")
        elif isinstance(op, PutOp):
            check_key(op.key)
            if op.value is None:
                check_labels(op.namespace)
                return
            self.layout.scope_of(check_item_namespace(op.namespace))
            if op.ttl is not None:
                if isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float)):
                    raise InvalidInputError(f"ttl is a number of minutes, got {op.ttl!r}")
                if not self.supports_ttl:
                    raise UnsupportedOperationError(f"the {self.store.name} store cannot expire records")
                self.store.expiry_after(op.ttl * 60)  # a ttl memcore refuses is refused here
            if op.index not in (None, False) and (
                not isinstance(op.index, list) or not all(isinstance(p, str) for p in op.index)
            ):
                raise InvalidInputError(f"index is False, None or a list of field paths, got {op.index!r}")
        else:
            raise InvalidInputError(f"unknown LangGraph operation {type(op).__name__}")

    # -- reads ------------------------------------------------------------------------------

    def _get(
        self, gets: list[tuple[int, GetOp]], results: list[Result], refreshes: _Refreshes
    ) -> _Plan[None]:
        by_scope: dict[tuple[str | None, ...], tuple[Scope, list[tuple[int, GetOp, UUID]]]] = {}
        for i, op in gets:
            namespace = tuple(op.namespace)
            exact = self.layout.item_scope(namespace)
            if exact is None:
                continue  # no item lives there
            record_id = self.layout.record_id(exact, namespace, op.key)
            by_scope.setdefault(exact.as_tuple(), (exact, []))[1].append((i, op, record_id))
        for scope, wanted in by_scope.values():
            records = yield from _call("get", scope, [record_id for _, _, record_id in wanted])
            found = {record.id: record for record in records}
            for i, op, record_id in wanted:
                record = found.get(record_id)
                item = None if record is None else self.layout.item(record)
                if record is None or item is None:
                    continue
                results[i] = item
                if op.refresh_ttl:
                    refreshes.add(record, self.layout.ttl_minutes(record))

    def _search(self, op: SearchOp, refreshes: _Refreshes) -> _Plan[list[SearchItem]]:
        prefix = tuple(op.namespace_prefix)
        spec = filters.check_filter(op.filter)
        scope = self.layout.read_scope(prefix)
        wanted = op.offset + op.limit
        if scope is None or op.limit == 0 or len(prefix) > MAX_NAMESPACE_DEPTH:
            return []
        native: FilterSpec = {"$and": [*self.layout.prefix_clauses(prefix), *filters.native_part(spec)]}
        found: list[tuple[MemoryRecord, Item, float | None]] = []
        if op.query and self._embedding is not None:
            [vector] = yield _EmbedCall([op.query], query=True)
            if not np.any(vector):
                return []  # no direction: similar to nothing (items so embedded have no vector)
            yield from self._bind()
            fetch = min(max(wanted, _MIN_PAGE), MAX_LIMIT)
            while True:
                hits = yield from _call("search", scope, vector=vector, filter=native, limit=fetch)
                found = [
                    (hit.record, item, hit.score)
                    for hit in hits
                    if (item := self._matching(hit.record, prefix, spec)) is not None
                ]
                if len(found) >= wanted or len(hits) < fetch or fetch == MAX_LIMIT:
                    break
                fetch = min(fetch * 4, MAX_LIMIT)
        else:
            cursor: datetime | None = None
            size = min(max(2 * wanted, _MIN_PAGE), MAX_LIMIT)
            while len(found) < wanted:
                page, cursor = yield from self._page(scope, native, size, cursor)
                for record in page:
                    if (item := self._matching(record, prefix, spec)) is not None:
                        found.append((record, item, None))
                if cursor is None:
                    break
        chosen = found[op.offset : wanted]
        if op.refresh_ttl:
            for record, _, _ in chosen:
                refreshes.add(record, self.layout.ttl_minutes(record))
        return [
            SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)
            for _, item, score in chosen
        ]

    def _matching(
        self, record: MemoryRecord, prefix: tuple[str, ...], spec: dict[str, Any] | None
    ) -> Item | None:
        """The item ``record`` holds if it lies under ``prefix`` (literally) and matches ``spec``."""
        item = self.layout.item(record)
        if item is None or tuple(item.namespace[: len(prefix)]) != prefix:
            return None
        return item if filters.matches(item.value, spec) else None

    def _page(
        self, scope: Scope, native: FilterSpec, size: int, before: datetime | None
    ) -> _Plan[tuple[list[MemoryRecord], datetime | None]]:
        """The next records, most recently written first, and the cursor after them (``None``
        at the end). A page that ends inside a group of equal timestamps takes the group whole."""
        page: list[MemoryRecord] = yield from _call(
            "list", scope, filter=native, order="desc", limit=size, before=before
        )
        if len(page) < size:
            return page, None
        last = page[-1].created_at
        group = yield from _call(
            "list", scope, filter=native, order="desc", after=last - _TICK, before=last + _TICK
        )
        return [r for r in page if r.created_at > last] + group, last

    def _list_namespaces(self, op: ListNamespacesOp) -> _Plan[list[tuple[str, ...]]]:
        conditions = list(op.match_conditions or ())
        if any(len(condition.path) > MAX_NAMESPACE_DEPTH for condition in conditions):
            return []  # no namespace is that deep
        prefix: tuple[str, ...] = ()
        clauses: list[FilterSpec] = []
        for condition in conditions:
            path = tuple(condition.path)
            if condition.match_type == "prefix":
                clauses += self.layout.prefix_clauses(path, wildcards=True)
                if len(path) > len(prefix):
                    prefix = path
            else:
                clauses += self.layout.suffix_clauses(path)
        fixed = prefix[: next((i for i, label in enumerate(prefix) if label == "*"), len(prefix))]
        scope = self.layout.read_scope(fixed)
        if scope is None or op.limit == 0:
            return []
        native: FilterSpec = {"$and": [*self.layout.prefix_clauses(()), *clauses]}
        namespaces: set[tuple[str, ...]] = set()
        cursor: datetime | None = None
        while True:
            page, cursor = yield from self._page(scope, native, MAX_LIMIT, cursor)
            for record in page:
                found = self.layout.namespace_of(record)
                if found is not None and all(_matches(c, found[0]) for c in conditions):
                    namespaces.add(found[0] if op.max_depth is None else found[0][: op.max_depth])
            if cursor is None:
                break
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    # -- writes -----------------------------------------------------------------------------

    def _prepare(self, puts: list[PutOp]) -> _Plan[_Writes]:
        """Everything ``puts`` write, read, embedded and checked, before anything is written.

        :raises InvalidInputError: for a put or delete of an id that holds a record which is not
            this deployment's item (another memory's record), or a record memcore refuses.
        """
        wanted: dict[tuple[str | None, ...], tuple[Scope, list[UUID]]] = {}
        targets: list[tuple[PutOp, Scope, UUID]] = []
        for op in puts:
            namespace = tuple(op.namespace)
            scope = self.layout.item_scope(namespace)
            if scope is None:
                continue  # a delete where no item can be (a put's namespace was checked)
            record_id = self.layout.record_id(scope, namespace, op.key)
            wanted.setdefault(scope.as_tuple(), (scope, []))[1].append(record_id)
            targets.append((op, scope, record_id))
        stored: dict[tuple[tuple[str | None, ...], UUID], MemoryRecord] = {}
        for scope, ids in wanted.values():
            for record in (yield from _call("get", scope, ids)):
                stored[(record.scope.as_tuple(), record.id)] = record
        writes = _Writes()
        items: list[tuple[PutOp, dict[str, Any], str, Item | None]] = []
        for op, scope, record_id in targets:
            old = stored.get((scope.as_tuple(), record_id))
            if old is not None and self.layout.namespace_of(old) is None:
                if op.value is None:
                    continue  # not an item: never deleted through LangGraph
                raise InvalidInputError(
                    f"item {op.key!r} of {tuple(op.namespace)!r}: its id holds a record that is not "
                    f"a LangGraph item (kind {old.kind!r}); it is left as it is"
                )
            if op.value is None:
                if old is not None:
                    writes.deletes.setdefault(scope.as_tuple(), (scope, []))[1].append(record_id)
                continue
            value, text = encode_value(op.value)
            items.append((op, value, text, None if old is None else self.layout.item(old)))
        if not items:
            return writes
        texts: dict[int, str] = {}
        if self._embedding is not None:
            for i, (op, value, _, _) in enumerate(items):
                if op.index is not False and (found := self._embedding.texts(value, op.index)) is not None:
                    texts[i] = found
        rows: dict[int, int] = {}
        vectors: Matrix | None = None
        if texts:
            embedded: Matrix = yield _EmbedCall(list(texts.values()), query=False)
            # An all-zero vector has no direction: its item is stored without one (as index=False).
            rows = {i: row for row, i in enumerate(texts) if np.any(embedded[row])}
            vectors = check_vectors(embedded[list(rows.values())], len(rows), None)
        for i, (op, value, text, old_item) in enumerate(items):
            expires_at = None if op.ttl is None else self.store.expiry_after(op.ttl * 60)
            created = None if old_item is None else old_item.created_at
            record = self.layout.record(
                tuple(op.namespace), op.key, text, created, op.ttl, filters.copied_values(value), expires_at
            )
            (writes.embedded if i in rows else writes.plain).append(record)
        writes.vectors = vectors if rows else None
        check_records([*writes.embedded, *writes.plain])  # one add each: refused before any write
        # Bound before any write, also one without vectors: a store that sizes its index on the
        # first write (Chroma) then takes the embedder's dimension.
        yield from self._bind()
        return writes

    def _bind(self) -> _Plan[None]:
        if not self._bound and self._embedding is not None:
            yield from _call("bind_vector_space", self._embedding.space)
            self._bound = True


def _check_page(limit: object, offset: object) -> None:
    for name, number in (("limit", limit), ("offset", offset)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise InvalidLimitError(f"{name} is a non-negative integer, got {number!r}")


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's namespace match (``"*"`` matches any label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    start = 0 if condition.match_type == "prefix" else len(namespace) - len(path)
    labels = namespace[start : start + len(path)]
    return all(p in ("*", label) for p, label in zip(path, labels, strict=True))
