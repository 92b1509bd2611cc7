"""The LangGraph adapter's tests, as a pytest mixin every store's test module includes.

    import pytest
    from memcore.testing.langgraph_tests import LangGraphStoreTests

    class TestLangGraphOnMyStore(LangGraphStoreTests):
        langgraph_examples = 15  # Hypothesis examples of the differential test

        @pytest.fixture
        def memcore_store(self, tmp_path):
            with MyStore(tmp_path / "db") as store:  # a fresh, empty store
                yield store

What it proves, offline (the ``hash`` embedder behind LangGraph's own ``index`` config):

* a differential test: random puts (with and without TTLs and ``index``), deletes, gets,
  searches (with and without a query, filter, limit, offset) and namespace listings, through the
  sync and the async API, against LangGraph's own ``InMemoryStore``, with the clock moved on a
  :class:`~memcore.testing.ManualClock`; each example is a deployment of its own (a fresh
  tenant) on the one store, so the examples also run side by side. The differences it allows are
  the documented ones: without a query, items come most recently updated first (PostgresStore's
  order; InMemoryStore's is its dicts'); a query search leaves out items without a vector
  (PostgresStore; InMemoryStore appends them unscored); InMemoryStore has no TTL, so the
  reference drops what has expired itself; a namespace whose items are all deleted is not listed;
* a compiled ``StateGraph`` with a checkpointer, whose nodes use the store through
  ``runtime.store`` and an injected ``store`` argument, sync and async;
* deployments (tenants) and users (``namespace_scope``) that never see each other's items, a
  forged record that is never returned, memcore's erasure of a user reaching every read path;
  deployments laying one scope out differently, and records of other memories holding an item's
  id, that are never replaced or deleted; a ``"*"`` label that is no wildcard in a search;
* a batch that is refused writing nothing; an all-zero embedding stored as no vector;
* typed errors for bad namespaces, filters and values.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore.embedders.hashing import HashEmbedder
from memcore.errors import FilterError, InvalidInputError, InvalidVectorError, RecordTooLargeError, ScopeError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.lifecycle_tests import ManualClock

_DIM = 16
_EMBEDDER = HashEmbedder(dim=_DIM)
_TEXTS = ("cats and dogs", "dogs bark", "the weather is cold", "cats purr", "blue sky")
_tenants = itertools.count()


def embed_texts(texts: Sequence[str]) -> list[list[float]]:
    """The ``hash`` embedder as a LangGraph embedding function (both stores get the same one)."""
    return [[float(x) for x in row] for row in _EMBEDDER.embed(list(texts))]


def _index() -> dict[str, Any]:
    return {"dims": _DIM, "embed": embed_texts, "fields": ["text"]}


# -- strategies ------------------------------------------------------------------------------------

_labels = st.sampled_from(["a", "b", "c", "*"])  # "*" is a literal label outside list_namespaces
_namespaces = st.lists(_labels, min_size=1, max_size=3).map(tuple)
_keys = st.sampled_from(["k1", "k2", "k3"])
_values = st.fixed_dictionaries(
    {},
    optional={
        "text": st.sampled_from(_TEXTS),
        "n": st.one_of(st.integers(-2, 2), st.sampled_from([0.5, 1.0, True, "1", "x"])),
        "tag": st.sampled_from(["x", "y"]),
        "m": st.fixed_dictionaries({"z": st.integers(0, 1)}),
        "l": st.lists(st.integers(0, 1), max_size=2),
    },
)
_filters = st.one_of(
    st.none(),
    st.sampled_from(
        [
            {"tag": "x"},
            {"tag": {"$eq": "y"}},
            {"tag": {"$ne": "x"}},
            {"n": 1},
            {"n": {"$gt": 0}},
            {"n": {"$gte": 0, "$lt": 2}},
            {"n": {"$lte": "1"}},
            {"m": {"z": 1}},
            {"l": [0, 1]},
            {"tag": "x", "n": {"$gt": -1}},
            {"missing": None},
        ]
    ),
)
_patterns = st.lists(st.sampled_from(["a", "b", "c", "*"]), max_size=2).map(tuple)
_puts = st.tuples(
    st.just("put"),
    _namespaces,
    _keys,
    _values,
    st.sampled_from([None, None, False, ["tag"]]),
    st.sampled_from([None, None, 1.0, 2.0]),
)
_ops = st.one_of(
    _puts,
    _puts,
    st.tuples(st.just("delete"), _namespaces, _keys),
    st.tuples(st.just("get"), _namespaces, _keys),
    st.tuples(
        st.just("search"),
        st.lists(_labels, max_size=2).map(tuple),
        st.sampled_from([None, "cats", "dogs bark", "weather"]),
        _filters,
        st.integers(1, 4),
        st.integers(0, 2),
    ),
    st.tuples(
        st.just("list"),
        _patterns,
        _patterns,
        st.sampled_from([None, 1, 2]),
        st.integers(1, 4),
        st.integers(0, 2),
    ),
    st.tuples(st.just("advance"), st.integers(1, 2)),
)


def _filtered(value: dict[str, Any], spec: dict[str, Any] | None) -> bool:
    """LangGraph's own filter function, an item it cannot compare counting as no match."""
    from langgraph.store.memory import _compare_values

    try:
        return all(_compare_values(value.get(k), v) for k, v in (spec or {}).items())
    except (TypeError, ValueError):
        return False


class _Reference:
    """LangGraph's ``InMemoryStore``, plus what it lacks: TTLs, and the time of each item's write."""

    def __init__(self) -> None:
        from langgraph.store.memory import InMemoryStore

        self.store = InMemoryStore(index=_index())  # type: ignore[arg-type]
        self.written: dict[tuple[tuple[str, ...], str], int] = {}
        self.expiry: dict[tuple[tuple[str, ...], str], tuple[float, float]] = {}
        self.now = 0.0
        self.writes = itertools.count()

    def put(self, namespace: tuple[str, ...], key: str, value: Any, index: Any, ttl: float | None) -> None:
        # InMemoryStore keeps an item's old vectors when it is put again with nothing to embed.
        self.store._vectors[namespace].pop(key, None)
        self.store.put(namespace, key, value, index)
        self.written[(namespace, key)] = next(self.writes)
        self.expiry.pop((namespace, key), None)
        if ttl is not None:
            self.expiry[(namespace, key)] = (self.now + ttl, ttl)

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        self.store.delete(namespace, key)
        self.expiry.pop((namespace, key), None)

    def touch(self, namespace: tuple[str, ...], key: str) -> None:
        if (namespace, key) in self.expiry:
            self.expiry[(namespace, key)] = (
                self.now + self.expiry[(namespace, key)][1],
                self.expiry[(namespace, key)][1],
            )

    def advance(self, minutes: float) -> None:
        self.now += minutes
        for (namespace, key), (when, _) in list(self.expiry.items()):
            if when <= self.now:
                self.delete(namespace, key)

    def everything(self, prefix: tuple[str, ...]) -> list[Any]:
        return self.store.search(prefix, limit=10_000)

    def namespaces(self, **options: Any) -> list[tuple[str, ...]]:
        for namespace in [ns for ns, items in self.store._data.items() if not items]:
            del self.store._data[namespace]  # InMemoryStore keeps a namespace once touched
        return self.store.list_namespaces(**options)


class LangGraphStoreTests:
    """The LangGraph adapter on one memcore store. Override :meth:`memcore_store`."""

    langgraph_examples: ClassVar[int] = 25
    """Hypothesis examples of the differential test (fewer on slow servers)."""
    langgraph_steps: ClassVar[int] = 14
    """Operations per example, at most."""

    @pytest.fixture
    def memcore_store(self) -> Iterator[Store]:
        """A fresh, empty memcore store (the backend's test module overrides this)."""
        raise NotImplementedError("override the memcore_store fixture")
        yield  # pragma: no cover

    def _adapter(self, store: Store, tenant: str, **options: Any) -> Any:
        from memcore.integrations.langgraph import MemcoreLangGraphStore

        return MemcoreLangGraphStore(store, Scope(tenant=tenant), **options)

    # -- 1. the differential test -------------------------------------------------------------

    def test_the_adapter_answers_as_langgraphs_in_memory_store(self, memcore_store: Store) -> None:
        clock = ManualClock()
        memcore_store.clock = clock
        expiry = memcore_store.capabilities.expiry

        @settings(
            max_examples=self.langgraph_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(
            st.lists(st.tuples(_puts, st.booleans()), min_size=2, max_size=8),
            st.lists(st.tuples(_ops, st.booleans()), min_size=4, max_size=self.langgraph_steps),
        )
        def run(puts: list[tuple[tuple[Any, ...], bool]], steps: list[tuple[tuple[Any, ...], bool]]) -> None:
            adapter = self._adapter(memcore_store, f"lg-{next(_tenants)}", index=_index())
            reference = _Reference()
            for op, through_async in puts + steps:
                _step(adapter, reference, clock, op, through_async, expiry)

        run()

    # -- 2. a compiled graph --------------------------------------------------------------------

    def test_a_compiled_graph_sees_what_its_last_run_wrote_and_nothing_of_another_user(
        self, memcore_store: Store
    ) -> None:
        graph = _graph(
            self._adapter(memcore_store, "graph", embedder=HashEmbedder(dim=_DIM)), asynchronous=False
        )
        first = graph.invoke({"message": "I live in Lyon"}, _config("t1"), context={"user": "alice"})
        second = graph.invoke({"message": "I like tea"}, _config("t1"), context={"user": "alice"})
        bob = graph.invoke({"message": "I am bob"}, _config("t2"), context={"user": "bob"})
        assert first["seen"] == [] and second["seen"] == ["I live in Lyon"]
        assert second["found"] == ["I live in Lyon"] and bob["seen"] == [] and bob["found"] == []
        assert second["turns"] == 2 and bob["turns"] == 1  # the checkpointer's state, per thread

    def test_a_compiled_graph_runs_through_the_async_api(self, memcore_store: Store) -> None:
        graph = _graph(
            self._adapter(memcore_store, "agraph", embedder=HashEmbedder(dim=_DIM)), asynchronous=True
        )

        async def main() -> list[dict[str, Any]]:
            return [
                await graph.ainvoke({"message": "I live in Lyon"}, _config("t1"), context={"user": "alice"}),
                await graph.ainvoke({"message": "I like tea"}, _config("t1"), context={"user": "alice"}),
                await graph.ainvoke({"message": "I am bob"}, _config("t2"), context={"user": "bob"}),
            ]

        first, second, bob = asyncio.run(main())
        assert first["seen"] == [] and second["seen"] == ["I live in Lyon"] and bob["seen"] == []
        assert second["found"] == ["I live in Lyon"] and bob["found"] == []

    # -- 3. isolation and erasure ---------------------------------------------------------------

    def test_two_deployments_never_see_or_delete_each_others_items(self, memcore_store: Store) -> None:
        one, two = (self._adapter(memcore_store, t, embedder=HashEmbedder(dim=_DIM)) for t in ("one", "two"))
        one.put(("docs", "x"), "k", {"text": "secret of one"})
        two.put(("docs", "y"), "other", {"text": "two's own"})
        for reads in (_reads(two), _areads(two)):
            found = reads(("docs", "x"), "k")
            assert found == {"get": None, "search": [], "query": ["two's own"], "namespaces": [("docs", "y")]}
        two.delete(("docs", "x"), "k")
        asyncio.run(two.adelete(("docs", "x"), "k"))
        assert one.get(("docs", "x"), "k") is not None
        assert [r.message.content for r in memcore_store.list(Scope(tenant="one"))] == [
            '{"text":"secret of one"}'
        ]

    def test_namespace_scope_stores_each_users_items_in_their_scope_and_erasure_removes_them(
        self, memcore_store: Store
    ) -> None:
        adapter = self._adapter(
            memcore_store, "acme", embedder=HashEmbedder(dim=_DIM), namespace_scope=("user_id",)
        )
        alice, bob = Scope(tenant="acme", user_id="alice"), Scope(tenant="acme", user_id="bob")
        adapter.put(("alice", "memories"), "m1", {"text": "alice likes tea"})
        adapter.put(("bob", "memories"), "m1", {"text": "bob likes tea"})
        assert [r.message.content for r in memcore_store.list(alice.exact())] == [
            '{"text":"alice likes tea"}'
        ]
        assert [r.message.content for r in memcore_store.list(bob.exact())] == ['{"text":"bob likes tea"}']
        # Another writer of bob's scope dresses a record up as alice's item, with its very id.
        [mine] = memcore_store.list(alice.exact())
        forged = mine.model_copy(
            update={"scope": bob, "message": Message(role="user", content='{"text":"forged"}')}
        )
        memcore_store.add([MemoryRecord.model_validate(forged.model_dump())], [[1.0] * _DIM])
        assert sorted(i.value["text"] for i in adapter.search((), query="tea")) == [
            "alice likes tea",
            "bob likes tea",
        ]
        assert adapter.get(("alice", "memories"), "m1").value == {"text": "alice likes tea"}
        assert sorted(i.value["text"] for i in adapter.search(())) == ["alice likes tea", "bob likes tea"]
        assert adapter.list_namespaces() == [("alice", "memories"), ("bob", "memories")]
        memcore_store.delete_where(alice, {})  # memcore's erasure of a user
        assert _reads(adapter)(("alice", "memories"), "m1") == {
            "get": None,
            "search": [],
            "query": ["bob likes tea"],
            "namespaces": [("bob", "memories")],
        }

    def test_a_star_label_in_a_search_prefix_is_a_label_not_a_wildcard(self, memcore_store: Store) -> None:
        adapter = self._adapter(memcore_store, "star", embedder=HashEmbedder(dim=_DIM))
        adapter.put(("alice", "memories"), "pin", {"text": "alice's pin is 1234"})
        adapter.put(("*", "memories"), "mine", {"text": "the star user's own"})
        for prefix in (("*",), ("*", "memories")):
            assert [i.key for i in adapter.search(prefix)] == ["mine"]
            assert [i.key for i in adapter.search(prefix, query="pin", limit=5)] == ["mine"]
            assert [
                i.key for i in asyncio.run(adapter.asearch(prefix, filter={"text": "alice's pin is 1234"}))
            ] == []
        assert adapter.list_namespaces(prefix=("*",)) == [("*", "memories"), ("alice", "memories")]

    def test_deployments_laying_one_scope_out_differently_never_touch_each_others_items(
        self, memcore_store: Store
    ) -> None:
        from memcore.integrations.langgraph import MemcoreLangGraphStore

        users = self._adapter(memcore_store, "layouts", namespace_scope=("user_id",))
        alice = MemcoreLangGraphStore(memcore_store, Scope(tenant="layouts", user_id="alice"))
        users.put(("alice", "prefs"), "k", {"from": "users"})
        assert alice.get(("alice", "prefs"), "k") is None
        assert alice.search(("alice",)) == [] and alice.list_namespaces() == []
        alice.put(("alice", "prefs"), "k", {"from": "alice"})
        alice.delete(("alice", "prefs"), "k")
        assert users.get(("alice", "prefs"), "k").value == {"from": "users"}
        assert [i.value for i in users.search(())] == [{"from": "users"}]

    def test_a_record_of_another_memory_holding_an_items_id_is_never_replaced_or_deleted(
        self, memcore_store: Store
    ) -> None:
        from langgraph.store.base import PutOp

        adapter = self._adapter(memcore_store, "other", namespace_scope=("user_id",))
        alice = Scope(tenant="other", user_id="alice")
        turn = MemoryRecord(
            id=adapter.layout.record_id(alice, ("alice", "notes"), "n1"),
            scope=alice,
            message=Message(role="user", content="a chat turn"),
            kind="turn",
        )
        memcore_store.add([turn])
        adapter.delete(("alice", "notes"), "n1")
        adapter.batch([PutOp(("alice", "notes"), "n1", None)])
        with pytest.raises(InvalidInputError):
            adapter.put(("alice", "notes"), "n1", {"v": 1})
        assert adapter.get(("alice", "notes"), "n1") is None
        assert [r.message.content for r in memcore_store.list(alice)] == ["a chat turn"]

    def test_a_refused_batch_writes_nothing(self, memcore_store: Store) -> None:
        from langgraph.store.base import PutOp

        def embed(texts: Sequence[str]) -> list[list[float]]:
            return [
                [math.nan] * _DIM if "nan" in text else row
                for text, row in zip(texts, embed_texts(texts), strict=True)
            ]

        adapter = self._adapter(
            memcore_store, "atomic", index={"dims": _DIM, "embed": embed, "fields": ["text"]}
        )
        adapter.put(("n",), "a", {"text": "old"})
        adapter.put(("n",), "gone", {"text": "keep me"})
        ttl = 5.0 if memcore_store.capabilities.expiry else None
        refused: list[tuple[type[Exception], PutOp]] = [
            (RecordTooLargeError, PutOp(("n",), "b", {"text": "x" * 1_100_000}, ttl=ttl)),
            (InvalidVectorError, PutOp(("n",), "b", {"text": "nan"})),
        ]
        for error, bad in refused:
            with pytest.raises(error):
                adapter.batch(
                    [PutOp(("n",), "gone", None), PutOp(("n",), "a", {"text": "new"}, ttl=ttl), bad]
                )
        assert {i.key: i.value["text"] for i in adapter.search(("n",))} == {"a": "old", "gone": "keep me"}

    def test_an_item_whose_embedding_is_all_zeros_is_stored_without_a_vector(
        self, memcore_store: Store
    ) -> None:
        from langgraph.store.base import PutOp

        def letters(texts: Sequence[str]) -> list[list[float]]:  # all zeros for text without a-p
            return [[float(text.count(chr(97 + i))) for i in range(_DIM)] for text in texts]

        adapter = self._adapter(
            memcore_store, "zeros", index={"dims": _DIM, "embed": letters, "fields": ["text"]}
        )
        adapter.put(("n",), "a", {"text": "old value"})
        adapter.batch([PutOp(("n",), "a", {"text": "new value"}), PutOp(("n",), "z", {"text": "123"})])
        assert {i.key: i.value["text"] for i in adapter.search(("n",))} == {"a": "new value", "z": "123"}
        assert [i.key for i in adapter.search(("n",), query="value")] == ["a"]
        assert adapter.search(("n",), query="42") == []  # a query without direction is like nothing
        assert asyncio.run(adapter.asearch(("n",), query="42")) == []

    # -- 4. typed errors ------------------------------------------------------------------------

    def test_bad_namespaces_filters_and_values_raise_typed_errors(self, memcore_store: Store) -> None:
        from langgraph.store.base import InvalidNamespaceError

        from memcore.integrations.langgraph import MAX_NAMESPACE_DEPTH, NamespaceError

        adapter = self._adapter(memcore_store, "errors")
        users = self._adapter(memcore_store, "errors", namespace_scope=("user_id",))
        bad: list[tuple[type[Exception], Callable[[], Any]]] = [
            (NamespaceError, lambda: adapter.put((), "k", {})),
            (NamespaceError, lambda: adapter.put(("a.b",), "k", {})),
            (NamespaceError, lambda: adapter.put(("langgraph", "x"), "k", {})),
            (NamespaceError, lambda: adapter.put(("a",) * (MAX_NAMESPACE_DEPTH + 1), "k", {})),
            (NamespaceError, lambda: adapter.search(("a.b",))),
            (NamespaceError, lambda: adapter.get(("",), "k")),
            (NamespaceError, lambda: adapter.list_namespaces(prefix=("a.b",))),
            (NamespaceError, lambda: asyncio.run(adapter.aput((), "k", {}))),
            (FilterError, lambda: adapter.search(("a",), filter={"n": {"$regex": "x"}})),
            (FilterError, lambda: adapter.search(("a",), filter={"n": {"$gt": "many"}})),
            (InvalidInputError, lambda: adapter.put(("a",), "k", {"x": {1, 2}})),
            (InvalidInputError, lambda: adapter.put(("a",), "k", {1: "one"})),
            (InvalidInputError, lambda: adapter.put(("a",), "k", {"x": object()})),
            (InvalidInputError, lambda: adapter.search(("a",), limit=-1)),
            (RecordTooLargeError, lambda: adapter.put(("a",), "k", {"x": "y" * 1_100_000})),
            (ScopeError, lambda: users.put(("alice smith", "m"), "k", {})),
        ]
        for error, call in bad:
            with pytest.raises(error):
                call()
        with pytest.raises(InvalidNamespaceError):  # also LangGraph's own error type
            adapter.put(("a.b",), "k", {})
        assert memcore_store.list(Scope(tenant="errors")) == []

    def test_ttl_expires_items_and_reads_refresh_them(self, memcore_store: Store) -> None:
        if not memcore_store.capabilities.expiry:
            pytest.skip(f"{memcore_store.name} lacks the capability 'expiry'")
        clock = ManualClock()
        memcore_store.clock = clock
        adapter = self._adapter(memcore_store, "ttl", ttl={"default_ttl": 2.0, "refresh_on_read": True})
        adapter.put(("a",), "read", {"v": 1})
        adapter.put(("a",), "unread", {"v": 2})
        adapter.put(("a",), "kept", {"v": 3}, ttl=None)
        clock.advance(90)
        assert adapter.get(("a",), "read") is not None  # refreshed: 2 minutes from now
        assert adapter.get(("a",), "unread", refresh_ttl=False) is not None
        clock.advance(60)
        assert [i.key for i in adapter.search(("a",), refresh_ttl=False)] == ["kept", "read"]
        assert adapter.list_namespaces() == [("a",)]
        clock.advance(120)
        assert [i.key for i in adapter.search(("a",))] == ["kept"]
        assert adapter.sweep_ttl() >= 0


def _step(
    adapter: Any,
    reference: _Reference,
    clock: ManualClock,
    op: tuple[Any, ...],
    through_async: bool,
    expiry: bool,
) -> None:
    kind = op[0]
    if kind == "put":
        _, namespace, key, value, index, ttl = op
        ttl = ttl if expiry else None
        if through_async:
            asyncio.run(adapter.aput(namespace, key, value, index, ttl=ttl))
        else:
            adapter.put(namespace, key, value, index, ttl=ttl)
        reference.put(namespace, key, value, index, ttl)
    elif kind == "delete":
        _, namespace, key = op
        asyncio.run(adapter.adelete(namespace, key)) if through_async else adapter.delete(namespace, key)
        reference.delete(namespace, key)
    elif kind == "get":
        _, namespace, key = op
        got = asyncio.run(adapter.aget(namespace, key)) if through_async else adapter.get(namespace, key)
        want = reference.store.get(namespace, key)
        assert (got is None) == (want is None), (op, got, want)
        if got is not None and want is not None:
            assert (got.namespace, got.key, got.value) == (want.namespace, want.key, want.value)
            assert got.created_at <= got.updated_at
            reference.touch(namespace, key)
    elif kind == "search":
        _search_step(adapter, reference, op, through_async)
    elif kind == "list":
        _, prefix, suffix, max_depth, limit, offset = op
        options = {
            "prefix": prefix or None,
            "suffix": suffix or None,
            "max_depth": max_depth,
            "limit": limit,
            "offset": offset,
        }
        got = (
            asyncio.run(adapter.alist_namespaces(**options))
            if through_async
            else adapter.list_namespaces(**options)
        )
        assert got == reference.namespaces(**options), op
    else:
        minutes = op[1]
        clock.advance(minutes * 60)
        reference.advance(minutes)


def _search_step(adapter: Any, reference: _Reference, op: tuple[Any, ...], through_async: bool) -> None:
    _, prefix, query, spec, limit, offset = op
    options = {"query": query, "filter": spec, "limit": limit, "offset": offset}
    got = (
        asyncio.run(adapter.asearch(prefix, **options))
        if through_async
        else adapter.search(prefix, **options)
    )
    candidates = [i for i in reference.everything(prefix) if _filtered(i.value, spec)]
    if query is None:
        candidates.sort(key=lambda i: reference.written[(i.namespace, i.key)], reverse=True)
        want = candidates[offset : offset + limit]
        assert [(i.namespace, i.key, i.value) for i in got] == [
            (i.namespace, i.key, i.value) for i in want
        ], op
        assert all(i.score is None for i in got)
    else:
        keys = {(i.namespace, i.key) for i in candidates}
        scored = {
            (i.namespace, i.key): i
            for i in reference.store.search(prefix, query=query, limit=10_000)
            if i.score is not None and (i.namespace, i.key) in keys
        }
        ranked = sorted(scored.values(), key=lambda i: -float(i.score or 0))[offset : offset + limit]
        assert len(got) == len(ranked), (op, got, ranked)
        for mine, theirs in zip(got, ranked, strict=True):
            assert math.isclose(mine.score, float(theirs.score or 0), abs_tol=1e-4), (op, got, ranked)
            assert mine.value == scored[(mine.namespace, mine.key)].value
            assert math.isclose(
                mine.score, float(scored[(mine.namespace, mine.key)].score or 0), abs_tol=1e-4
            )
    for item in got:
        reference.touch(item.namespace, item.key)


# -- the graph ---------------------------------------------------------------------------------------


class _State(TypedDict, total=False):
    message: str
    seen: list[str]
    found: list[str]
    turns: int


class _Context(TypedDict):
    user: str


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _graph(store: Any, *, asynchronous: bool) -> Any:
    """``remember`` reads the user's memories and writes the new one through ``runtime.store``;
    ``recall`` searches them by similarity through an injected ``store`` argument."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime
    from langgraph.store.base import BaseStore

    def remember(state: _State, runtime: Runtime[_Context]) -> _State:
        assert runtime.store is not None
        namespace = (runtime.context["user"], "memories")
        seen = [i.value["text"] for i in runtime.store.search(namespace)]
        runtime.store.put(namespace, f"m{len(seen)}", {"text": state["message"]})
        return {"seen": seen, "turns": state.get("turns", 0) + 1}

    def recall(state: _State, runtime: Runtime[_Context], *, store: BaseStore) -> _State:
        hits = store.search((runtime.context["user"], "memories"), query="where do I live", limit=5)
        return {"found": [i.value["text"] for i in hits if i.value["text"] != state["message"]][:1]}

    async def aremember(state: _State, runtime: Runtime[_Context]) -> _State:
        assert runtime.store is not None
        namespace = (runtime.context["user"], "memories")
        seen = [i.value["text"] for i in await runtime.store.asearch(namespace)]
        await runtime.store.aput(namespace, f"m{len(seen)}", {"text": state["message"]})
        return {"seen": seen, "turns": state.get("turns", 0) + 1}

    async def arecall(state: _State, runtime: Runtime[_Context], *, store: BaseStore) -> _State:
        hits = await store.asearch((runtime.context["user"], "memories"), query="where do I live", limit=5)
        return {"found": [i.value["text"] for i in hits if i.value["text"] != state["message"]][:1]}

    builder = StateGraph(_State, context_schema=_Context)
    builder.add_node("remember", aremember if asynchronous else remember)
    builder.add_node("recall", arecall if asynchronous else recall)  # type: ignore[call-overload]
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def _reads(adapter: Any) -> Callable[[tuple[str, ...], str], dict[str, Any]]:
    def read(namespace: tuple[str, ...], key: str) -> dict[str, Any]:
        return {
            "get": adapter.get(namespace, key),
            "search": [i.value["text"] for i in adapter.search(namespace)],
            "query": [i.value["text"] for i in adapter.search((), query="secret", limit=20)],
            "namespaces": adapter.list_namespaces(),
        }

    return read


def _areads(adapter: Any) -> Callable[[tuple[str, ...], str], dict[str, Any]]:
    def read(namespace: tuple[str, ...], key: str) -> dict[str, Any]:
        async def main() -> dict[str, Any]:
            return {
                "get": await adapter.aget(namespace, key),
                "search": [i.value["text"] for i in await adapter.asearch(namespace)],
                "query": [i.value["text"] for i in await adapter.asearch((), query="secret", limit=20)],
                "namespaces": await adapter.alist_namespaces(),
            }

        return asyncio.run(main())

    return read
