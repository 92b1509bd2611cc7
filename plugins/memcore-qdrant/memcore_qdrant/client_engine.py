"""The server engine: a collection on a Qdrant server, through qdrant-client.

The same class also drives qdrant-client's local mode (``QdrantClient(path=...)``),
which the plugin keeps only for comparison in ``benchmarks/qdrant_embedded.py``
and for running the conformance suite over this code: local mode evaluates
filters in Python point by point, far too slow for the embedded default.

The collection is created with no dense vector; the first vector write adds
the cosine vector ``dense`` (``create_vector_name``, Qdrant 1.18), so records
without vectors can be written before the dimension is known. Text search uses
``MatchSubstring`` (Qdrant 1.20): :func:`check_server_version` refuses older
servers when the store opens. On a server, the scope fields get keyword payload
indexes (``tenant`` with ``is_tenant=True``), as do ``role``, ``kind``, ``record_id`` and
``scope_keys`` (which :meth:`~memcore_qdrant.store.QdrantStore._scopes` facets); ``created_at``
gets an integer index for ordered reads, ``expires_at`` one for every read's live condition and
``sweep``. Every open creates the indexes that are missing, so a creation cut short by a crash
is completed, and a collection made before records could expire gains the ``expires_at`` index
(its points keep no ``expires_at`` and never expire: :mod:`memcore_qdrant.filters`).
The vector-space binding lives in the collection's metadata.

An update's write (:meth:`ClientEngine.replace_calls`) is an ``update_only`` upsert whose
``update_filter`` is the record's scope, id and live condition: Qdrant checks and writes in one
step, so it never brings back a point another client deleted, nor one that expired.

A collection of an earlier layout is brought up to date when it opens (each step
marked done in the metadata last, so one a crash cut short runs again): one made
before keyword search gains the ``keywords`` vector (:meth:`ClientEngine._add_keywords`),
and one whose point ids were record ids has each point moved to its record's
:func:`~memcore.scope.storage_id` (:meth:`ClientEngine._rekey`).

Several clients may share a collection, so what this engine knows of it is
re-read whenever it could be stale: while it has seen no ``dense`` vector or no
binding, every call that depends on them reads the collection again, and a
binding is re-read right before it is written (another client's is refused).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

from qdrant_client import QdrantClient, models

from memcore.errors import DimensionMismatchError, EmbedderMismatchError, StoreCorruptedError
from memcore.kit import check_same_dimension
from memcore.records import MemoryRecord
from memcore.scope import storage_id
from memcore.sessions import run_session
from memcore.store import VectorSpace
from memcore_qdrant import payload as fields
from memcore_qdrant.calls import ClientCall, ClientSession
from memcore_qdrant.engine import (
    SCROLL_PAGE,
    VECTOR_NAME,
    Direction,
    Hit,
    Point,
    indexes_to_create,
    keep_forever,
    pages,
)
from memcore_qdrant.errors import IncompatibleCollectionError, IncompatibleServerError
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
from memcore_qdrant.keywords import KEYWORD_VECTOR, SparseVector, distinct_terms

SPACE_KEY = "memcore_vector_space"
"""The key of the vector-space binding in the collection's metadata."""

KEYWORDS_KEY = "memcore_keywords"
"""Set in the collection's metadata once every point has its ``keywords`` vector and ``terms``."""

STORAGE_IDS_KEY = "memcore_storage_ids"
"""Set in the collection's metadata once every point's id is its record's storage id."""

MIN_SERVER_VERSION = (1, 20)
"""The oldest Qdrant server the plugin works with: ``MatchSubstring`` (text search) came in 1.20,
``create_vector_name`` (the first vector write) in 1.18."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)")


def check_server_version(client: QdrantClient, location: str) -> str:
    """The server's version, after checking that it is at least :data:`MIN_SERVER_VERSION`.

    :raises IncompatibleServerError: if the server is older, or does not tell its version.
    """
    version = str(client.info().version)
    found = _VERSION.match(version)
    minimum = ".".join(map(str, MIN_SERVER_VERSION))
    if found is None or (int(found[1]), int(found[2])) < MIN_SERVER_VERSION:
        raise IncompatibleServerError(
            f"the Qdrant server at {location} runs version {version!r}; memcore-qdrant needs Qdrant "
            f"{minimum} or newer (text search uses MatchSubstring). Upgrade the server, for example with "
            "the image pinned in docker/qdrant/"
        )
    return version


def render_condition(condition: Condition) -> models.Condition:
    """The qdrant-client model for one neutral condition."""
    if isinstance(condition, Clause):
        return render_filter(condition)
    if isinstance(condition, HasId):
        return models.HasIdCondition(has_id=[str(point_id) for point_id in condition.ids])
    if isinstance(condition, IsEmpty):
        return models.IsEmptyCondition(is_empty=models.PayloadField(key=condition.key))
    if isinstance(condition, ScopeIs):
        return models.Filter(must=_scope_matches(condition))
    if isinstance(condition, Range):
        bounds = models.Range(gt=condition.gt, gte=condition.gte, lt=condition.lt, lte=condition.lte)
        return models.FieldCondition(key=condition.key, range=bounds)
    match: models.Match
    if isinstance(condition, Match):
        match = models.MatchValue(value=condition.value)
    elif isinstance(condition, MatchAny):
        match = models.MatchAny(any=list(condition.values))
    else:
        assert isinstance(condition, MatchSubstring)
        match = models.MatchSubstring(substring=condition.substring)
    return models.FieldCondition(key=condition.key, match=match)


def _scope_matches(scope: ScopeIs) -> list[models.Condition]:
    return [
        models.FieldCondition(key=name, match=models.MatchValue(value=value)) for name, value in scope.fields
    ]


def render_filter(clause: Clause) -> models.Filter:
    """The qdrant-client ``Filter`` for a clause (an empty clause matches everything).

    A scope in ``must`` becomes one top-level match per scope field, on the keyword indexes.
    """
    clause = flattened(clause)
    must: list[models.Condition] = []
    for condition in clause.must:
        must += _scope_matches(condition) if isinstance(condition, ScopeIs) else [render_condition(condition)]
    return models.Filter(
        must=must or None,
        should=[render_condition(c) for c in clause.should] or None,
        must_not=[render_condition(c) for c in clause.must_not] or None,
    )


def _payload(whole: bool) -> bool | list[str]:
    return True if whole else list(fields.READ_FIELDS)


def _vectors(point: Point) -> dict[str, Any]:
    indices, values = fields.keyword_vector(point.payload)
    vectors: dict[str, Any] = {KEYWORD_VECTOR: models.SparseVector(indices=indices, values=values)}
    if point.vector is not None:
        vectors[VECTOR_NAME] = point.vector
    return vectors


def _keyword_updates(points: Sequence[Point]) -> list[models.UpdateOperation]:
    """Give each point its ``terms`` payload field and its ``keywords`` vector, touching nothing else."""
    operations: list[models.UpdateOperation] = []
    vectors = []
    for point in points:
        text = str(point.payload.get(fields.TEXT, ""))
        terms = models.SetPayload(payload={fields.TERMS: distinct_terms(text)}, points=[str(point.id)])
        operations.append(models.SetPayloadOperation(set_payload=terms))
        indices, values = fields.keyword_vector(point.payload)
        sparse = models.SparseVector(indices=indices, values=values)
        vectors.append(models.PointVectors(id=str(point.id), vector={KEYWORD_VECTOR: sparse}))
    operations.append(models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=vectors)))
    return operations


def _readable(points: Sequence[Point]) -> Iterator[tuple[Point, MemoryRecord]]:
    """Each point whose payload holds a readable record, with that record."""
    for point in points:
        try:
            yield point, fields.from_payload(point.payload)
        except StoreCorruptedError:
            continue


class ClientEngine:
    """One collection reached through a :class:`~qdrant_client.QdrantClient`.

    :param client: a remote client, or a local-mode one.
    :param collection: the collection's name; created if missing.
    :param location: the URL or path, for messages.
    :param server: create payload indexes (a server uses them; local mode ignores them).
    """

    prunes_live_condition = False

    def __init__(self, client: QdrantClient, collection: str, location: str, *, server: bool) -> None:
        self._server = server
        self.location = location
        self._client = client
        self._collection = collection
        self._dimension: int | None = None
        self._space: VectorSpace | None = None
        if not client.collection_exists(collection):
            try:
                client.create_collection(
                    collection,
                    vectors_config={},
                    sparse_vectors_config={KEYWORD_VECTOR: models.SparseVectorParams()},
                )
            except Exception:
                if not client.collection_exists(collection):
                    raise
                # another client created it meanwhile
        info = self._refresh()
        if server:
            self._ensure_indexes(info.payload_schema or {})
        metadata = info.config.metadata or {}
        if not metadata.get(KEYWORDS_KEY):
            self._add_keywords(info)
        if not metadata.get(STORAGE_IDS_KEY):
            self._rekey()

    def _add_keywords(self, info: models.CollectionInfo) -> None:
        """Give a collection made before keyword search its ``keywords`` vector and every point its terms.

        The metadata flag is set last, so an upgrade a crash interrupted runs again at the next open.
        """
        if KEYWORD_VECTOR not in (info.config.params.sparse_vectors or {}):
            config = models.SparseVectorNameConfig(sparse=models.SparseVectorConfig())
            try:
                self._client.create_vector_name(self._collection, KEYWORD_VECTOR, config, wait=True)
            except Exception:
                sparse = self._client.get_collection(self._collection).config.params.sparse_vectors
                if KEYWORD_VECTOR not in (sparse or {}):
                    raise
                # another client added it meanwhile
        # Partial updates of the points still lacking terms, never a rewrite of the whole point: a
        # rewrite could bring back a record another client deleted meanwhile, or undo its update.
        lacking = models.Filter(
            must=[models.IsEmptyCondition(is_empty=models.PayloadField(key=fields.TERMS))]
        )
        for page in self._pages(lacking, with_vectors=False, limit=None, whole_payload=True):
            if page:
                self._client.batch_update_points(self._collection, _keyword_updates(page), wait=True)
        self._client.update_collection(self._collection, metadata={KEYWORDS_KEY: True})

    def _rekey(self) -> None:
        """Move each point whose id is its record's id (the first layout, without a ``record_id``
        field) to its record's storage id, in the current layout, with its vector.

        Page by page, the new points are written before the old ones are deleted, so a run a crash
        cut short loses nothing and the next open finishes it. A new id already holding a current
        point (the same record, moved by a run cut short or written since) is left as it is. One
        holding a point of the first layout (whose record id was chosen equal to this storage id)
        waits for another pass, once that point has moved. Points without a readable record stay.
        """
        legacy = models.Filter(
            must=[models.IsEmptyCondition(is_empty=models.PayloadField(key=fields.RECORD_ID))]
        )
        waiting = True
        while waiting:
            waiting = moved = False
            for page in self._pages(legacy, with_vectors=True, limit=None, whole_payload=True):
                targets = {storage_id(r.scope, r.id): (p, r) for p, r in _readable(page)}
                if not targets:
                    continue
                held = self.scroll(Clause(must=(HasId(tuple(targets)),)), whole_payload=True)
                current = {p.id: fields.RECORD_ID in p.payload for p in held}
                new = [
                    Point(target, fields.to_payload(record), point.vector)
                    for target, (point, record) in targets.items()
                    if target not in current
                ]
                # The old point goes once its new id is free (written just now) or holds a current point.
                old: list[models.ExtendedPointId] = [
                    point.id for target, (point, _) in targets.items() if current.get(target, True)
                ]
                waiting = waiting or len(old) < len(targets)
                moved = moved or bool(old)
                if new:
                    self.upsert(new)
                if old:
                    selector = models.PointIdsList(points=old)
                    self._client.delete(self._collection, points_selector=selector, wait=True)
            if waiting and not moved:
                raise StoreCorruptedError(
                    f"the collection {self._collection!r} at {self.location} has points whose new ids "
                    "hold one another; restore it from a backup"
                )
        self._client.update_collection(self._collection, metadata={STORAGE_IDS_KEY: True})

    def _refresh(self) -> models.CollectionInfo:
        """Read the collection's dense vector and binding again (another client may have set them)."""
        info = self._client.get_collection(self._collection)
        self._dimension = self._dense_vector(info.config.params.vectors)
        self._space = self._read_space(info.config.metadata)
        return info

    def _ensure_indexes(self, present: dict[str, Any]) -> None:
        """Create whichever of memcore's payload indexes the collection lacks."""
        for name in fields.KEYWORD_FIELDS:
            if name not in present:
                schema = models.KeywordIndexParams(
                    type=models.KeywordIndexType.KEYWORD, is_tenant=True if name == fields.TENANT else None
                )
                self._client.create_payload_index(self._collection, name, field_schema=schema, wait=True)
        for name in fields.INTEGER_FIELDS:
            if name not in present:
                integer = models.IntegerIndexParams(
                    type=models.IntegerIndexType.INTEGER, lookup=True, range=True
                )
                self._client.create_payload_index(self._collection, name, field_schema=integer, wait=True)

    def _dense_vector(self, vectors: Any) -> int | None:
        where = f"the collection {self._collection!r} at {self.location}"
        if vectors is None:
            return None
        if not isinstance(vectors, dict):
            raise IncompatibleCollectionError(
                f"{where} has an unnamed vector; memcore needs its own named vector {VECTOR_NAME!r}. "
                "Use another collection (qdrant+http://host:port/<collection>)"
            )
        dense = vectors.get(VECTOR_NAME)
        if dense is None:
            return None
        if dense.distance != models.Distance.COSINE:
            raise IncompatibleCollectionError(
                f"{where} has a {dense.distance.value} vector {VECTOR_NAME!r}; "
                "memcore needs cosine similarity. Use another collection"
            )
        size: int = dense.size
        return size

    def _read_space(self, metadata: dict[str, Any] | None) -> VectorSpace | None:
        space = (metadata or {}).get(SPACE_KEY)
        if space is None:
            return None
        embedder, dimension = space.get("embedder"), space.get("dimension")
        if not isinstance(embedder, str) or not isinstance(dimension, int):
            raise StoreCorruptedError(
                f"the collection {self._collection!r} has invalid memcore metadata {space!r}"
            )
        if self._dimension not in (None, dimension):
            raise IncompatibleCollectionError(
                f"the collection {self._collection!r} holds {self._dimension}-dimensional vectors "
                f"but is bound to {embedder!r} ({dimension} dimensions)"
            )
        return VectorSpace(embedder, dimension)

    def dimension(self) -> int | None:
        if self._dimension is None:
            self._refresh()
        return self._dimension

    def none_expired(self, now: int) -> bool:
        """Never known here: other clients write the collection (and reads send the live condition)."""
        return False

    def add_vectors(self, dimension: int) -> None:
        config = models.DenseVectorNameConfig(
            dense=models.DenseVectorConfig(size=dimension, distance=models.Distance.COSINE)
        )
        try:
            self._client.create_vector_name(self._collection, VECTOR_NAME, config, wait=True)
        except Exception:
            if self.dimension() is None:
                raise
            # another client added the vector meanwhile
        else:
            self._dimension = dimension
        check_same_dimension(self._dimension, dimension)

    # -- the calls of every turn: sessions of client calls, made on QdrantClient here and awaited
    # on AsyncQdrantClient by a server store's async API (memcore_qdrant.calls) -----------------

    def _make(self, call: ClientCall) -> Any:
        return getattr(self._client, call.method)(*call.args, **call.kwargs)

    def upsert(self, points: Sequence[Point]) -> None:
        run_session(self.upsert_calls(points), self._make)

    def upsert_calls(self, points: Sequence[Point]) -> ClientSession[None]:
        structs = [models.PointStruct(id=str(p.id), vector=_vectors(p), payload=p.payload) for p in points]
        yield ClientCall("upsert", (self._collection,), {"points": structs, "wait": True})

    def replace(self, point: Point, where: Clause) -> None:
        run_session(self.replace_calls(point, where), self._make)

    def replace_calls(self, point: Point, where: Clause) -> ClientSession[None]:
        """An ``update_only`` upsert with ``where`` as its ``update_filter``: Qdrant overwrites the point
        only if it exists and matches, checking and writing in one step on the server."""
        struct = models.PointStruct(id=str(point.id), vector=_vectors(point), payload=point.payload)
        yield ClientCall(
            "upsert",
            (self._collection,),
            {
                "points": [struct],
                "update_filter": render_filter(where),
                "update_mode": models.UpdateMode.UPDATE_ONLY,
                "wait": True,
            },
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
        return run_session(self.scroll_calls(where, limit, order, with_vectors, whole_payload), self._make)

    def scroll_calls(
        self,
        where: Clause,
        limit: int | None = None,
        order: Direction | None = None,
        with_vectors: bool = False,
        whole_payload: bool = False,
    ) -> ClientSession[list[Point]]:
        """:meth:`scroll`: one ordered page, or page after page of :data:`SCROLL_PAGE` points."""
        request: dict[str, Any] = {
            "scroll_filter": render_filter(where),
            "with_payload": _payload(whole_payload),
            "with_vectors": with_vectors,
        }
        if order is not None:
            direction = models.Direction.ASC if order == "asc" else models.Direction.DESC
            request["order_by"] = models.OrderBy(key=fields.CREATED_AT, direction=direction)
            records, _ = yield ClientCall(
                "scroll", (self._collection,), {**request, "limit": limit or SCROLL_PAGE}
            )
            return [self._point(r) for r in records]
        found: list[Point] = []
        offset: Any = None
        while limit is None or len(found) < limit:
            size = SCROLL_PAGE if limit is None else min(SCROLL_PAGE, limit - len(found))
            records, offset = yield ClientCall(
                "scroll", (self._collection,), {**request, "limit": size, "offset": offset}
            )
            found += [self._point(r) for r in records]
            if offset is None:
                break
        return found

    def _pages(
        self, scroll_filter: models.Filter, with_vectors: bool, limit: int | None, whole_payload: bool = False
    ) -> Iterator[list[Point]]:
        """Page after page, never holding more than one (migrations copy whole collections)."""

        def fetch(offset: Any, size: int) -> tuple[list[Point], Any]:
            records, next_offset = self._client.scroll(
                self._collection,
                scroll_filter=scroll_filter,
                limit=size,
                offset=offset,
                with_payload=_payload(whole_payload),
                with_vectors=with_vectors,
            )
            return [self._point(r) for r in records], next_offset

        return pages(fetch, limit)

    @staticmethod
    def _point(record: models.Record) -> Point:
        vectors = record.vector if isinstance(record.vector, dict) else {}
        dense = vectors.get(VECTOR_NAME)
        vector = [float(x) for x in dense if isinstance(x, float | int)] if isinstance(dense, list) else None
        return Point(UUID(str(record.id)), record.payload or {}, vector)

    def query(self, vector: Sequence[float], where: Clause, limit: int) -> list[Hit]:
        return run_session(self.query_calls(vector, where, limit), self._make)

    def query_calls(self, vector: Sequence[float], where: Clause, limit: int) -> ClientSession[list[Hit]]:
        return (yield from self._ranked(list(vector), VECTOR_NAME, where, limit))

    def keyword_query(self, query: SparseVector, where: Clause, limit: int) -> list[Hit]:
        return run_session(self.keyword_query_calls(query, where, limit), self._make)

    def keyword_query_calls(self, query: SparseVector, where: Clause, limit: int) -> ClientSession[list[Hit]]:
        indices, values = query
        sparse = models.SparseVector(indices=indices, values=values)
        return (yield from self._ranked(sparse, KEYWORD_VECTOR, where, limit))

    def _ranked(self, query: Any, using: str, where: Clause, limit: int) -> ClientSession[list[Hit]]:
        response = yield ClientCall(
            "query_points",
            (self._collection,),
            {
                "query": query,
                "using": using,
                "query_filter": render_filter(where),
                "limit": limit,
                "with_payload": list(fields.READ_FIELDS),
            },
        )
        return [Hit(p.score, p.payload or {}) for p in response.points]

    def count(self, where: Clause) -> int:
        return run_session(self.count_calls(where), self._make)

    def count_calls(self, where: Clause) -> ClientSession[int]:
        counted = yield ClientCall(
            "count", (self._collection,), {"count_filter": render_filter(where), "exact": True}
        )
        return int(counted.count)

    def facet(self, key: str, where: Clause, limit: int) -> list[tuple[str, int]]:
        return run_session(self.facet_calls(key, where, limit), self._make)

    def facet_calls(self, key: str, where: Clause, limit: int) -> ClientSession[list[tuple[str, int]]]:
        response = yield ClientCall(
            "facet",
            (self._collection,),
            {"key": key, "facet_filter": render_filter(where), "limit": limit, "exact": True},
        )
        return [(str(hit.value), int(hit.count)) for hit in response.hits]

    def delete(self, where: Clause) -> None:
        run_session(self.delete_calls(where), self._make)

    def delete_calls(self, where: Clause) -> ClientSession[None]:
        selector = models.FilterSelector(filter=render_filter(where))
        yield ClientCall("delete", (self._collection,), {"points_selector": selector, "wait": True})

    def index_fields(self, wanted: set[tuple[str, IndexKind]]) -> None:
        if not (wanted and self._server):
            return
        present = set(self._client.get_collection(self._collection).payload_schema or {})
        for path, kind in indexes_to_create(present, wanted):
            schema: Any = {
                "keyword": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD),
                "integer": models.IntegerIndexParams(
                    type=models.IntegerIndexType.INTEGER, lookup=True, range=True
                ),
                "float": models.FloatIndexParams(type=models.FloatIndexType.FLOAT),
            }[kind]
            self._client.create_payload_index(self._collection, path, field_schema=schema, wait=True)

    def load_space(self) -> VectorSpace | None:
        if self._space is None:
            self._refresh()
        return self._space

    def save_space(self, space: VectorSpace) -> None:
        """Write the binding, unless another client bound the collection to another embedder first.

        Qdrant has no compare-and-set on metadata: two clients binding in the same
        instant can still race; this closes the window to one request.
        """
        self._refresh()
        if self._space is not None and self._space != space:
            raise EmbedderMismatchError(
                f"the collection {self._collection!r} at {self.location} is bound to the embedder "
                f"{self._space.embedder!r} ({self._space.dimension} dimensions), not {space.embedder!r} "
                f"({space.dimension}); use a collection of its own for another embedder"
            )
        if self._dimension not in (None, space.dimension):
            raise DimensionMismatchError(
                f"the collection holds {self._dimension}-dimensional vectors, not {space.dimension}"
            )
        metadata = {SPACE_KEY: {"embedder": space.embedder, "dimension": space.dimension}}
        self._client.update_collection(self._collection, metadata=metadata)
        self._space = space

    def purge(self) -> None:
        """Nothing to do here: Qdrant's optimizer vacuums deleted points from the segments itself."""

    def replace_client(self, client: QdrantClient) -> None:
        """Use ``client`` from now on: in a forked child, instead of the parent's.

        The inherited client is neither closed nor ever dropped here (its destructor would close
        it): its HTTP connections are the parent's too, and closing them, or sending on them,
        would end or mix the parent's requests. What this engine knows of the collection (the
        dimension, the binding) carries over; it is re-read whenever it could be stale anyway.
        """
        keep_forever(self._client)
        self._client = client

    def close(self) -> None:
        self._client.close()
