"""Expiry on stores written before records could expire, and how scopes are counted.

Points written before ``expires_at`` existed lack that payload key, and their shards and
collections lack its integer index. Nothing rewrites them: such a record never expires, and the
compiled conditions say so (a read's live condition is ``must_not: expires_at <= now``, a filter
on ``expires_at`` adds or excludes the missing key); opening creates the missing index. Both
engines: a Qdrant Edge shard of schema version 2 and, for the server path's
:class:`~memcore_qdrant.client_engine.ClientEngine`, a collection in qdrant-client's local mode.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as edge
from hypothesis import given, settings
from hypothesis import strategies as st
from memcore_qdrant import QdrantStore, edge_engine, meta
from memcore_qdrant import payload as fields
from memcore_qdrant.client_engine import KEYWORDS_KEY, STORAGE_IDS_KEY
from memcore_qdrant.connections import DEFAULT_COLLECTION
from memcore_qdrant.engine import VECTOR_NAME
from memcore_qdrant.filters import scoped, with_ids
from memcore_qdrant.keywords import KEYWORD_VECTOR
from memcore_qdrant.store import _point
from qdrant_client import QdrantClient, models

from memcore.records import NEVER_EXPIRES, MemoryRecord, Message
from memcore.scope import SCOPE_FIELDS, Scope, storage_id
from memcore.store import VectorSpace
from memcore.testing.lifecycle_tests import ManualClock

ACME = Scope(tenant="acme")
MINE, THEIRS = Scope(tenant="acme", user_id="alice"), Scope(tenant="acme", user_id="bob", session_id="s")
DIM = 8

Old = tuple[MemoryRecord, list[float]]


def _unit(seed: int) -> list[float]:
    vector = np.random.default_rng(seed).normal(size=DIM)
    return (vector / np.linalg.norm(vector)).tolist()


def _old_payload(record: MemoryRecord) -> dict[str, object]:
    """The payload memcore wrote before records could expire: no ``expires_at``, and the key of
    every subset of the scope's fields in ``scope_keys``."""
    payload = fields.to_payload(record)
    del payload[fields.EXPIRES_AT]
    payload[fields.SCOPE_KEYS] = _every_subset_key(record.scope.items())
    return payload


def _write_edge(root: Path, points: Sequence[Old]) -> None:
    """A Qdrant Edge shard of schema version 2, with the payload indexes of its time."""
    config = edge.EdgeConfig(sparse_vectors={KEYWORD_VECTOR: edge.EdgeSparseVectorParams()})
    shard = edge.EdgeShard.create(str(root / edge_engine.SHARD), config)
    for name in fields.KEYWORD_FIELDS:
        keyword = edge.KeywordIndexParams(is_tenant=name == fields.TENANT)
        shard.update(edge.UpdateOperation.create_field_index(name, keyword))
    integer = edge.IntegerIndexParams(lookup=True, range=True)
    shard.update(edge.UpdateOperation.create_field_index(fields.CREATED_AT, integer))
    shard.update(edge.UpdateOperation.create_dense_vector(VECTOR_NAME, DIM, edge.Distance.Cosine))
    written = []
    for record, vector in points:
        payload = _old_payload(record)
        sparse = edge.SparseVector(*fields.keyword_vector(payload))
        written.append(
            edge.Point(
                storage_id(record.scope, record.id), {VECTOR_NAME: vector, KEYWORD_VECTOR: sparse}, payload
            )
        )
    shard.update(edge.UpdateOperation.upsert_points(written))
    assert fields.EXPIRES_AT not in shard.info().payload_schema
    shard.close()
    meta.write_space(root, VectorSpace("test", DIM))


def _write_local(root: Path, points: Sequence[Old]) -> None:
    """A collection of the same layout in qdrant-client's local mode."""
    client = QdrantClient(path=str(root / "client"))
    client.create_collection(
        DEFAULT_COLLECTION,
        vectors_config={VECTOR_NAME: models.VectorParams(size=DIM, distance=models.Distance.COSINE)},
        sparse_vectors_config={KEYWORD_VECTOR: models.SparseVectorParams()},
        metadata={KEYWORDS_KEY: True, STORAGE_IDS_KEY: True},
    )
    structs = []
    for record, vector in points:
        payload = _old_payload(record)
        indices, values = fields.keyword_vector(payload)
        sparse = models.SparseVector(indices=indices, values=values)
        point_id = str(storage_id(record.scope, record.id))
        structs.append(
            models.PointStruct(
                id=point_id, vector={VECTOR_NAME: vector, KEYWORD_VECTOR: sparse}, payload=payload
            )
        )
    client.upsert(DEFAULT_COLLECTION, points=structs)
    client.close()


Layout = tuple[Callable[[Path, Sequence[Old]], None], Callable[[Path], QdrantStore]]

LAYOUTS: dict[str, Layout] = {
    "edge": (_write_edge, lambda root: QdrantStore.from_url(f"qdrant://{root}")),
    "local": (_write_local, QdrantStore.open_local_client),
}


@pytest.fixture(params=sorted(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> Layout:
    return LAYOUTS[request.param]


def _record(scope: Scope, content: str) -> MemoryRecord:
    return MemoryRecord(scope=scope, message=Message(role="user", content=content))


def test_records_written_before_expiry_never_expire_and_every_read_sees_them(
    tmp_path: Path, layout: Layout
) -> None:
    write, open_store = layout
    tea, coffee, water = _record(MINE, "old tea"), _record(MINE, "old coffee"), _record(THEIRS, "old water")
    # Stored before every scope had a tenant: only Scope.everything() sees it.
    relic_scope = Scope.model_construct(tenant=None, user_id="alice", agent_id=None, session_id=None)
    relic = MemoryRecord.model_construct(**{**_record(MINE, "relic").__dict__, "scope": relic_scope})
    write(tmp_path, [(tea, _unit(1)), (coffee, _unit(2)), (water, _unit(3)), (relic, _unit(5))])
    with open_store(tmp_path) as store:
        clock = ManualClock()
        store.clock = clock
        if write is _write_edge:  # the open created the index the shard lacked
            engine = store._engine
            assert isinstance(engine, edge_engine.EdgeEngine)
            assert fields.EXPIRES_AT in engine._shard.info().payload_schema
        clock.advance(10**9)  # decades: nothing written then expires
        assert store.get(MINE, [tea.id, coffee.id]) == [tea, coffee]
        assert list(store.vectors(MINE, [tea.id])) == [tea.id]
        assert store.list(ACME) == [tea, coffee, water]
        assert store.list(ACME, limit=1, order="desc") == [water]
        assert store.count(ACME) == 3
        assert store.search(MINE, vector=_unit(2), limit=1)[0].record == coffee
        assert [h.record for h in store.search(MINE, keywords="tea")] == [tea]
        assert [h.record for h in store.search(ACME, text="WATER")] == [water]
        assert [(e.scope, e.count) for e in store.scopes(ACME)] == [(MINE.exact(), 2), (THEIRS.exact(), 1)]
        everything = [(e.scope.as_tuple(), e.count) for e in store.scopes(Scope.everything())]
        assert everything == [
            (relic_scope.as_tuple(), 1),
            (MINE.exact().as_tuple(), 2),
            (THEIRS.exact().as_tuple(), 1),
        ]
        # A filter on expires_at sees them as never expiring (NEVER_EXPIRES), as the reference does.
        soon = clock.now + timedelta(days=1)
        for spec, expected in (
            ({"expires_at": {"$gt": soon}}, 3),
            ({"expires_at": {"$gte": NEVER_EXPIRES}}, 3),
            ({"expires_at": {"$lt": soon}}, 0),
            ({"expires_at": {"$lte": soon}}, 0),
            ({"expires_at": NEVER_EXPIRES}, 3),
            ({"expires_at": {"$ne": NEVER_EXPIRES}}, 0),
            ({"expires_at": {"$in": [soon, NEVER_EXPIRES]}}, 3),
            ({"expires_at": {"$nin": [NEVER_EXPIRES]}}, 0),
            ({"$not": {"expires_at": {"$lt": soon}}}, 3),
        ):
            assert store.count(ACME, filter=spec) == expected, spec
        fleeting = _record(MINE, "new tea")
        store.add([fleeting], [_unit(4)], ttl=60)  # in the current layout, beside the earlier one
        assert store.count(ACME, filter={"expires_at": {"$lt": soon}}) == 1
        everything = [(e.scope.as_tuple(), e.count) for e in store.scopes(Scope.everything())]
        assert everything == [
            (relic_scope.as_tuple(), 1),
            (MINE.exact().as_tuple(), 3),
            (THEIRS.exact().as_tuple(), 1),
        ]
        assert (
            store.update(MINE, coffee.id, content="old coffee, now short-lived", ttl=30).expires_at
            is not None
        )
        clock.advance(45)
        assert {r.id for r in store.get(MINE, [tea.id, coffee.id, fleeting.id])} == {tea.id, fleeting.id}
        clock.advance(30)
        assert store.get(MINE, [tea.id, coffee.id, fleeting.id]) == [tea]
        assert store.scopes(ACME)[0].count == 1
        assert store.sweep() == 2  # the two that expired; the records written before stay
        store.purge()
        assert store.count(ACME) == 2
    with open_store(tmp_path) as store:
        store.clock = ManualClock(clock.now - timedelta(days=1))  # deleted, not hidden
        assert store.list(ACME) == [tea, water]


@pytest.mark.parametrize("engine", ["edge", "local"])
def test_the_conditional_write_of_an_update_never_brings_back_a_deleted_or_expired_point(
    tmp_path: Path, engine: str
) -> None:
    """What an update's write does when a delete or the expiry comes between its check and its
    write (on a server, another client's delete can): nothing."""
    opened = (
        QdrantStore.from_url(f"qdrant://{tmp_path}")
        if engine == "edge"
        else QdrantStore.open_local_client(tmp_path)
    )
    with opened as store:
        clock = ManualClock()
        store.clock = clock
        deleted, expiring = _record(MINE, "deleted"), _record(MINE, "expiring")
        store.add([deleted, expiring], [_unit(1), _unit(2)], ttl=60)
        for record in (deleted, expiring):
            changed = record.model_copy(update={"message": Message(role="user", content="changed")})
            if record is deleted:
                assert store.delete(MINE, [record.id]) == 1
            else:
                clock.advance(61)
            where = scoped(MINE.exact(), with_ids([record.id]), store._alive())
            store._engine.replace(_point(changed, np.asarray(_unit(3), dtype=np.float32)), where)
        clock.now -= timedelta(seconds=120)
        listed = [(r.id, r.message.content) for r in store.list(ACME)]
        assert listed == [(expiring.id, "expiring")]  # not revived, not changed


ScopeTuple = tuple[str | None, ...]

_SCOPES = st.tuples(
    st.sampled_from([None, "t1", "t2"]),  # None: a record stored before every scope had a tenant
    st.sampled_from([None, "u1", "u2"]),
    st.sampled_from([None, "a"]),
    st.sampled_from([None, "s1", "s2"]),
).filter(lambda values: any(value is not None for value in values))


def _every_subset_key(pairs: list[tuple[str, str]]) -> list[str]:
    """The ``scope_keys`` of a point written before only the subsets a read scope can be were listed."""
    return [
        fields.scope_key(subset) for size in range(1, len(pairs) + 1) for subset in combinations(pairs, size)
    ]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_SCOPES, st.booleans()), min_size=1, max_size=30))
def test_the_scope_facets_invert_into_exact_scope_counts(points: list[tuple[ScopeTuple, bool]]) -> None:
    """Points of both layouts (``True``: every subset listed), with and without a tenant, facetted as
    ``QdrantStore._scopes_session`` asks: the keys with a tenant of every point, and the keys of the
    points without one."""
    with_tenant: Counter[str] = Counter()
    tenantless: Counter[str] = Counter()
    for values, earlier_layout in points:
        pairs = [(name, value) for name, value in zip(SCOPE_FIELDS, values, strict=True) if value is not None]
        keys = _every_subset_key(pairs) if earlier_layout else fields._scope_keys(pairs)
        if values[0] is None:
            tenantless.update(keys)
        else:
            with_tenant.update(key for key in keys if fields.has_tenant(key))
    facet = [*with_tenant.items(), *tenantless.items()]
    assert dict(fields.exact_scope_counts(facet)) == Counter(values for values, _ in points)


def test_a_record_with_a_tenant_lists_the_keys_of_the_read_scopes_it_is_in() -> None:
    pairs = [("tenant", "t"), ("user_id", "u"), ("session_id", "s")]
    assert fields._scope_keys(pairs) == [
        "tenant=t",
        "tenant=t|user_id=u",
        "tenant=t|session_id=s",
        "tenant=t|user_id=u|session_id=s",
    ]
    assert fields._scope_keys([("user_id", "u"), ("agent_id", "a")]) == [
        "user_id=u",
        "agent_id=a",
        "user_id=u|agent_id=a",
    ]
