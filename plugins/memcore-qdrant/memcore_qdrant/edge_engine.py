"""The embedded engine: a Qdrant Edge shard (qdrant-edge-py), Qdrant's own Rust engine in-process.

Layout of an embedded store's folder::

    .lock           flock held by the one process that has the store open
    memcore.json    format, schema version and vector-space binding (see :mod:`memcore_qdrant.meta`)
    shard/          the Qdrant Edge shard (WAL, segments, edge_config.json)

A shard needs a vector at creation, but memcore learns the dimension only from
the first vector written; the shard is therefore created with the ``keywords``
sparse vector alone (:mod:`memcore_qdrant.keywords`; shards made before it have an
unused :data:`PLACEHOLDER` instead, and are rebuilt with it when they open) and gains
the ``dense`` cosine vector later. The
scope fields, ``role``, ``kind`` and ``record_id`` get keyword indexes (``tenant`` with
``is_tenant``), ``created_at`` an integer index, which ordered reads need, and ``expires_at``
one, which every read's live condition and ``sweep`` use. Every open creates whichever of these
indexes is missing, so a shard whose creation a crash cut short (config written, indexes not
yet) is completed, and one made before records could expire gains the ``expires_at`` index (its
points keep no ``expires_at`` and never expire: :mod:`memcore_qdrant.filters`).
Segments are never optimised into HNSW graphs: a scoped search scores the
scope's points exactly, found through the payload index, which is both exact
and fast for agent memory (see the plugin README for the measurements).

:meth:`EdgeEngine.purge` rebuilds the shard from its live points in
``shard.new`` and swaps it in, so deleted records leave no bytes behind (the WAL
included), copying one page of points at a time; :func:`_recover` finishes or
discards a swap a crash interrupted. The copy is also how a shard of an earlier layout
is brought up to date when it opens: one made before keyword search, or one whose
point ids were record ids (schema version 1 in ``memcore.json``, or no ``memcore.json``),
is rebuilt with each point under its record's :func:`~memcore.scope.storage_id`
(:func:`_current`), then ``memcore.json`` records the current schema version. A
rebuild a crash cut short is discarded and runs again at the next open.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import qdrant_edge as edge

from memcore.errors import StoreCorruptedError
from memcore.records import NEVER_EXPIRES, epoch_micros
from memcore.scope import storage_id
from memcore.store import VectorSpace
from memcore_qdrant import meta
from memcore_qdrant import payload as fields
from memcore_qdrant.disk import FRESH_SHARD_BYTES, Watermark, allocated_bytes, estimated_bytes
from memcore_qdrant.engine import (
    VECTOR_NAME,
    Direction,
    Hit,
    Point,
    indexes_to_create,
    keep_forever,
    pages,
)
from memcore_qdrant.errors import IncompatibleCollectionError
from memcore_qdrant.filters import (
    Clause,
    Condition,
    HasId,
    IndexKind,
    IsEmpty,
    Match,
    MatchAny,
    MatchSubstring,
    Range,
    ScopeIs,
    flattened,
)
from memcore_qdrant.keywords import KEYWORD_VECTOR, SparseVector

PLACEHOLDER = "memcore-placeholder"
"""The unused sparse vector shards were created with before they had ``keywords``."""

SHARD, NEW_SHARD, OLD_SHARD = "shard", "shard.new", "shard.old"

NEVER_EXPIRES_MICROS = epoch_micros(NEVER_EXPIRES)


def render_condition(condition: Condition) -> Any:
    """The qdrant-edge-py object for one neutral condition."""
    if isinstance(condition, Clause):
        return render_filter(condition)
    if isinstance(condition, HasId):
        return edge.HasIdCondition(set(condition.ids))
    if isinstance(condition, IsEmpty):
        return edge.IsEmptyCondition(condition.key)
    if isinstance(condition, ScopeIs):
        return edge.FieldCondition(
            key=fields.SCOPE_KEYS, match=edge.MatchValue(fields.scope_key(condition.fields))
        )
    if isinstance(condition, Range):
        bounds = edge.RangeFloat(gt=condition.gt, gte=condition.gte, lt=condition.lt, lte=condition.lte)
        return edge.FieldCondition(key=condition.key, range=bounds)
    match: Any
    if isinstance(condition, Match):
        match = edge.MatchValue(condition.value)
    elif isinstance(condition, MatchAny):
        match = edge.MatchAny(list(condition.values))  # type: ignore[arg-type]  # str or int, never mixed
    else:
        assert isinstance(condition, MatchSubstring)
        match = edge.MatchSubstring(condition.substring)
    return edge.FieldCondition(key=condition.key, match=match)


def render_filter(clause: Clause) -> edge.Filter:
    """The qdrant-edge-py ``Filter`` for a clause (an empty clause matches everything)."""
    clause = flattened(clause)
    return edge.Filter(
        must=[render_condition(c) for c in clause.must] or None,
        should=[render_condition(c) for c in clause.should] or None,
        must_not=[render_condition(c) for c in clause.must_not] or None,
    )


def _payload(whole: bool) -> bool | list[str]:
    return True if whole else list(fields.READ_FIELDS)


def _uuid(point_id: object) -> UUID:
    return point_id if isinstance(point_id, UUID) else UUID(str(point_id))


def _edge_point(point: Point) -> edge.Point:
    vectors: dict[str, Any] = {KEYWORD_VECTOR: edge.SparseVector(*fields.keyword_vector(point.payload))}
    if point.vector is not None:
        vectors[VECTOR_NAME] = point.vector
    return edge.Point(point.id, vectors, point.payload)


def _create_shard(path: Path) -> edge.EdgeShard:
    config = edge.EdgeConfig(sparse_vectors={KEYWORD_VECTOR: edge.EdgeSparseVectorParams()})
    shard = edge.EdgeShard.create(str(path), config)
    ensure_indexes(shard)
    return shard


def ensure_indexes(shard: edge.EdgeShard) -> None:
    """Create whichever of memcore's payload indexes the shard lacks (all of them on a new shard)."""
    present = set(shard.info().payload_schema)
    for name in fields.KEYWORD_FIELDS:
        if name not in present:
            keyword = edge.KeywordIndexParams(is_tenant=name == fields.TENANT)
            shard.update(edge.UpdateOperation.create_field_index(name, keyword))
    for name in fields.INTEGER_FIELDS:
        if name not in present:
            integer = edge.IntegerIndexParams(lookup=True, range=True)
            shard.update(edge.UpdateOperation.create_field_index(name, integer))


def _current(point: Point) -> Point:
    """``point`` in the current layout.

    A point written before the ``record_id`` payload field (its id was its record's id, and it
    may lack ``terms``) is rebuilt from its record, under the record's storage id. One without a
    readable record is kept as it is (reading it raises :class:`~memcore.errors.StoreCorruptedError`).
    """
    if fields.RECORD_ID in point.payload:
        return point
    try:
        record = fields.from_payload(point.payload)
    except StoreCorruptedError:
        return point
    return Point(storage_id(record.scope, record.id), fields.to_payload(record), point.vector)


def _expiry(payload: dict[str, Any] | None) -> int:
    """A point's ``expires_at``; a point written before records could expire has none, and never does."""
    value = None if payload is None else payload.get(fields.EXPIRES_AT)
    return value if isinstance(value, int) else NEVER_EXPIRES_MICROS


def _recover(root: Path) -> None:
    """Finish or undo a :meth:`EdgeEngine.purge` that a crash interrupted."""
    shard, new, old = root / SHARD, root / NEW_SHARD, root / OLD_SHARD
    if not shard.exists() and new.exists():
        new.rename(shard)  # the crash fell between the two renames: the rebuilt shard is complete
    if new.exists():
        shutil.rmtree(new)  # an unfinished rebuild: the old shard is still authoritative
    if old.exists():
        shutil.rmtree(old)


def _read_config(shard_path: Path) -> dict[str, Any]:
    config_path = shard_path / "edge_config.json"
    try:
        config = json.loads(config_path.read_bytes())
    except (OSError, ValueError) as exc:
        raise IncompatibleCollectionError(
            f"{config_path} is not a readable Qdrant Edge config ({exc})"
        ) from None
    if not isinstance(config, dict):
        raise IncompatibleCollectionError(f"{config_path} is not a Qdrant Edge config")
    return config


def _dense_vector(config: dict[str, Any], shard_path: Path) -> int | None:
    """The size of the shard's ``dense`` vector, checking it is one memcore can use."""
    vectors = config.get("vectors") or {}
    unknown = set(vectors) - {VECTOR_NAME}
    if unknown:
        raise IncompatibleCollectionError(
            f"the Qdrant Edge shard at {shard_path} has vectors {sorted(unknown)} that memcore "
            "did not create; open memcore on another path"
        )
    dense = vectors.get(VECTOR_NAME)
    if dense is None:
        return None
    if dense.get("distance") != "Cosine" or not isinstance(dense.get("size"), int):
        raise IncompatibleCollectionError(
            f"the Qdrant Edge shard at {shard_path} has a {dense.get('distance')} vector {VECTOR_NAME!r}; "
            "memcore needs cosine similarity. Open memcore on another path"
        )
    size: int = dense["size"]
    return size


_engines: weakref.WeakSet[EdgeEngine] = weakref.WeakSet()
"""Every engine open in this process."""


def _keep_inherited_shards() -> None:
    """In a forked child: the parent's shards must never be dropped here (a drop flushes them)."""
    for engine in list(_engines):
        keep_forever(engine._shard)
    _engines.clear()


os.register_at_fork(after_in_child=_keep_inherited_shards)


class EdgeEngine:
    """A Qdrant Edge shard under ``root``, with memcore's metadata beside it.

    :param root: the store's folder (created by the caller, locked by the caller).
    """

    prunes_live_condition = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)
        self._room = Watermark(root)
        self._soonest_expiry: int | None = None  # see none_expired: None until read
        self._soonest_expiry_exact = False
        _recover(root)
        shard_path = root / SHARD
        version = meta.read_version(root)
        self._space = meta.read_space(root)
        if (shard_path / "edge_config.json").exists():
            config = _read_config(shard_path)
            self._dimension = _dense_vector(config, shard_path)
            if self._space is not None and self._dimension not in (None, self._space.dimension):
                raise IncompatibleCollectionError(
                    f"the shard at {shard_path} holds {self._dimension}-dimensional vectors but the store "
                    f"is bound to {self._space.embedder!r} ({self._space.dimension} dimensions)"
                )
            # Made before keyword search or before storage ids: rebuilt in the current layout.
            outdated = (
                KEYWORD_VECTOR not in (config.get("sparse_vectors") or {}) or version != meta.SCHEMA_VERSION
            )
            self._shard = edge.EdgeShard.load(str(shard_path))
        else:
            if shard_path.exists():
                shutil.rmtree(shard_path)  # a creation that crashed before writing its config
            self._room.check("create the shard")
            self._dimension = None
            outdated = False
            self._shard = _create_shard(shard_path)
        try:
            ensure_indexes(self._shard)  # a creation cut short by a crash left some out
            if outdated:
                self.purge()
            if version != meta.SCHEMA_VERSION:
                meta.write_space(root, self._space)  # last: a rebuild cut short runs again
        except BaseException:
            with contextlib.suppress(Exception):  # purge may have closed it already
                self._shard.close()
            raise
        _engines.add(self)

    def dimension(self) -> int | None:
        return self._dimension

    def none_expired(self, now: int) -> bool:
        """Whether no point of the shard expires at or before ``now`` (epoch microseconds).

        The engine keeps a lower bound of every point's ``expires_at``: found by one ordered read
        of the ``expires_at`` index, lowered by every write, and read again, once, after a write
        or delete that may have raised it (an overwritten or deleted point may have held it), when
        ``now`` has reached it. Exact: every write of the shard comes through this engine.
        """
        if self._soonest_expiry is not None and now < self._soonest_expiry:
            return True
        if self._soonest_expiry is None or not self._soonest_expiry_exact:
            self._soonest_expiry = self._read_soonest_expiry()
            self._soonest_expiry_exact = True
        return now < self._soonest_expiry

    def _read_soonest_expiry(self) -> int:
        request = edge.ScrollRequest(
            limit=1,
            with_payload=[fields.EXPIRES_AT],
            order_by=edge.OrderBy(fields.EXPIRES_AT, edge.Direction.Asc),
        )
        records, _ = self._shard.scroll(request)
        return _expiry(records[0].payload) if records else NEVER_EXPIRES_MICROS

    def _written(self, points: Sequence[Point]) -> None:
        """Lower the bound of :meth:`none_expired` to the points written; it may no longer be exact,
        as they may overwrite the point that held it."""
        self._soonest_expiry_exact = False
        if self._soonest_expiry is not None:
            self._soonest_expiry = min([self._soonest_expiry, *(_expiry(p.payload) for p in points)])

    def add_vectors(self, dimension: int) -> None:
        self._room.check("add the vector")
        self._shard.update(
            edge.UpdateOperation.create_dense_vector(VECTOR_NAME, dimension, edge.Distance.Cosine)
        )
        self._dimension = dimension

    def upsert(self, points: Sequence[Point]) -> None:
        self._room.check("add records", self._written_bytes(points))
        self._written(points)
        self._shard.update(edge.UpdateOperation.upsert_points([_edge_point(p) for p in points]))

    def _written_bytes(self, points: Sequence[Point]) -> int:
        payloads = sum(
            len(str(p.payload.get(fields.RECORD, ""))) + len(str(p.payload.get(fields.TEXT, "")))
            for p in points
        )
        return estimated_bytes(payloads, len(points), self._dimension)

    def replace(self, point: Point, where: Clause) -> None:
        self._room.check("update a record", self._written_bytes([point]))
        condition = render_filter(where)
        self._written([point])
        self._shard.update(
            edge.UpdateOperation.upsert_points([_edge_point(point)], condition, edge.UpdateMode.UpdateOnly)
        )

    def scroll(
        self,
        where: Clause,
        *,
        limit: int | None = None,
        order: Direction | None = None,
        with_vectors: bool = False,
        whole_payload: bool = False,
    ) -> list[Point]:
        query_filter = render_filter(where)
        if order is not None:
            direction = edge.Direction.Asc if order == "asc" else edge.Direction.Desc
            request = edge.ScrollRequest(
                limit=limit,
                filter=query_filter,
                with_payload=_payload(whole_payload),
                with_vector=with_vectors,
                order_by=edge.OrderBy(fields.CREATED_AT, direction),
            )
            records, _ = self._shard.scroll(request)
            return [self._point(r) for r in records]
        pages = self._pages(query_filter, with_vectors, limit, whole_payload)
        return [point for page in pages for point in page]

    def _pages(
        self,
        query_filter: edge.Filter,
        with_vectors: bool,
        limit: int | None = None,
        whole_payload: bool = False,
    ) -> Iterator[list[Point]]:
        def fetch(offset: Any, size: int) -> tuple[list[Point], Any]:
            request = edge.ScrollRequest(
                offset=offset,
                limit=size,
                filter=query_filter,
                with_payload=_payload(whole_payload),
                with_vector=with_vectors,
            )
            records, next_offset = self._shard.scroll(request)
            return [self._point(r) for r in records], next_offset

        return pages(fetch, limit)

    @staticmethod
    def _point(record: Any) -> Point:
        vector = record.vector.get(VECTOR_NAME) if isinstance(record.vector, dict) else None
        return Point(_uuid(record.id), record.payload or {}, vector)

    def query(self, vector: Sequence[float], where: Clause, limit: int) -> list[Hit]:
        request = edge.QueryRequest(
            limit=limit,
            query=edge.Query.Nearest(list(vector), using=VECTOR_NAME),
            filter=render_filter(where),
            with_payload=list(fields.READ_FIELDS),
            params=edge.SearchParams(exact=True),
        )
        return [Hit(p.score, p.payload or {}) for p in self._shard.query(request)]

    def keyword_query(self, query: SparseVector, where: Clause, limit: int) -> list[Hit]:
        request = edge.QueryRequest(
            limit=limit,
            query=edge.Query.Nearest(edge.SparseVector(*query), using=KEYWORD_VECTOR),
            filter=render_filter(where),
            with_payload=list(fields.READ_FIELDS),
        )
        return [Hit(p.score, p.payload or {}) for p in self._shard.query(request)]

    def count(self, where: Clause) -> int:
        return self._shard.count(edge.CountRequest(exact=True, filter=render_filter(where)))

    def facet(self, key: str, where: Clause, limit: int) -> list[tuple[str, int]]:
        request = edge.FacetRequest(key, limit=limit, exact=True, filter=render_filter(where))
        return [(str(hit.value), hit.count) for hit in self._shard.facet(request).hits]

    def delete(self, where: Clause) -> None:
        self._room.check("delete records")
        self._soonest_expiry_exact = False
        self._shard.update(edge.UpdateOperation.delete_points_by_filter(render_filter(where)))

    def index_fields(self, wanted: set[tuple[str, IndexKind]]) -> None:
        if not wanted:
            return
        for path, kind in indexes_to_create(set(self._shard.info().payload_schema), wanted):
            self._room.check("index a metadata key")
            params: Any = {
                "keyword": edge.KeywordIndexParams(),
                "integer": edge.IntegerIndexParams(lookup=True, range=True),
                "float": edge.FloatIndexParams(),
            }[kind]
            self._shard.update(edge.UpdateOperation.create_field_index(path, params))

    def load_space(self) -> VectorSpace | None:
        return self._space

    def save_space(self, space: VectorSpace) -> None:
        meta.write_space(self.root, space)
        self._space = space

    def purge(self) -> None:
        # A copy of the live points in a new shard, beside the old one.
        self._room.check("purge", allocated_bytes(self.root / SHARD) + FRESH_SHARD_BYTES, factor=1)
        new_path = self.root / NEW_SHARD
        if new_path.exists():
            shutil.rmtree(new_path)
        rebuilt = _create_shard(new_path)
        try:
            if self._dimension is not None:
                rebuilt.update(
                    edge.UpdateOperation.create_dense_vector(
                        VECTOR_NAME, self._dimension, edge.Distance.Cosine
                    )
                )
            for page in self._pages(render_filter(Clause()), with_vectors=True, whole_payload=True):
                if page:
                    points = [_edge_point(_current(p)) for p in page]
                    rebuilt.update(edge.UpdateOperation.upsert_points(points))
            rebuilt.flush()
        finally:
            rebuilt.close()
        self._shard.close()
        shard_path = self.root / SHARD
        shard_path.rename(self.root / OLD_SHARD)
        new_path.rename(shard_path)
        shutil.rmtree(self.root / OLD_SHARD)
        self._shard = edge.EdgeShard.load(str(shard_path))
        self._soonest_expiry = None

    def close(self) -> None:
        self._shard.flush()
        self._shard.close()
