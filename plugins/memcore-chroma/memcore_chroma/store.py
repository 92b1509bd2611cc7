"""The Chroma stores: embedded (``chroma://``), in memory (``chroma+memory://``), server (``chroma+http://``).

All three share :class:`ChromaStoreBase`; they differ in how they connect
(:mod:`memcore_chroma.connection`) and in their capabilities. One memcore
store is one Chroma collection (cosine space) holding records laid out as
:mod:`memcore_chroma.encoding` describes; the collection's metadata keeps the
format, the vector dimension and the embedder binding, so they survive reopen.

Reads compile the scope and the filter into one ``where``
(:mod:`memcore_chroma.filters`). When that ``where`` is exact, counts and
limits go to Chroma as they are; when it is a superset, candidates are
fetched (over-fetching, then fetching more until ``limit`` hits or no more
candidates) and post-filtered with :func:`memcore.filters.evaluate`. Text
search is a case-insensitive substring match evaluated here, over the
scope's candidates: Chroma's ``where_document`` ``$contains`` is
case-sensitive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar
from uuid import UUID, uuid4

import numpy as np
from chromadb.api.collection_configuration import CreateCollectionConfiguration
from chromadb.api.models.Collection import Collection
from chromadb.errors import NotFoundError

from memcore.errors import DimensionMismatchError, IdConflictError, InvalidInputError, StoreCorruptedError
from memcore.filters import Filter, evaluate
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import Scope
from memcore.store import BaseStore, Capabilities, Order, VectorSpace, text_matches
from memcore.validation import Matrix, check_dimension
from memcore_chroma import connection, erasure, urls
from memcore_chroma.connection import Connection
from memcore_chroma.encoding import (
    CREATED_AT_KEY,
    VECTOR_KEY,
    Where,
    all_of,
    decode,
    encode,
    epoch_micros,
    flat_metadata,
    placeholder_vectors,
    scope_clauses,
    stored_scope,
)
from memcore_chroma.errors import translated
from memcore_chroma.filters import CompiledFilter, compile_filter

FORMAT = "memcore-chroma/1"
META_FORMAT = "memcore.format"
META_DIMENSION = "memcore.dimension"
META_INDEX_DIMENSION = "memcore.index_dimension"
META_EMBEDDER = "memcore.embedder"
DEFAULT_COLLECTION = "memcore"
REBUILD_SUFFIX = ".rebuild"
COSINE: CreateCollectionConfiguration = {"hnsw": {"space": "cosine"}}
PAGE_SIZE = 1_000
"""Entries per request when copying a collection or writing a large batch."""
MIN_OVERFETCH = 64
"""Candidates fetched at least when a search must post-filter; then 4 times more per round."""

T = TypeVar("T")


def check_collection_name(name: str) -> str:
    """Check a collection name against Chroma's rules (leaving room for the rebuild suffix).

    :raises InvalidInputError: if Chroma would refuse it.
    """
    ok = (
        isinstance(name, str)
        and 3 <= len(name) <= 512 - len(REBUILD_SUFFIX)
        and name[0].isalnum()
        and name[-1].isalnum()
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )
    if not ok:
        raise InvalidInputError(
            f"invalid Chroma collection name {name!r}: use 3-504 characters of [A-Za-z0-9._-], "
            "starting and ending with a letter or digit"
        )
    return name


def _order_key(record: MemoryRecord) -> tuple[datetime, UUID]:
    return record.created_at, record.id


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ChromaStoreBase(BaseStore):
    """What the three Chroma stores share: everything but connecting.

    :param chroma: the client to use; released by :meth:`close`.
    :param collection: the collection holding this store's records (created if missing).
    :param dimension: fix the vector dimension up front; an existing collection
        of another dimension raises :class:`~memcore.errors.DimensionMismatchError`.
    """

    def __init__(self, chroma: Connection, collection: str, dimension: int | None) -> None:
        super().__init__()
        self._connection = chroma
        self._name = collection
        self._meta: dict[str, Any] = {}
        try:
            check_collection_name(collection)
            check_dimension(dimension)
            with chroma.write_lock, translated(f"opening the Chroma collection {collection!r}"):
                self._collection = self._open_collection()
                self._check_collection(dimension)
        except BaseException:
            chroma.release()
            raise

    # -- opening ---------------------------------------------------------------

    def _find(self, name: str) -> Collection | None:
        try:
            return self._connection.client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None

    def _open_collection(self) -> Collection:
        client = self._connection.client
        main, leftover = self._find(self._name), self._find(self._name + REBUILD_SUFFIX)
        if leftover is not None:
            if main is None:  # a rebuild copied everything, dropped the old one, then stopped
                leftover.modify(name=self._name)
                return leftover
            client.delete_collection(leftover.name)  # a rebuild stopped half-way: the original is intact
        if main is not None:
            return main
        return client.get_or_create_collection(
            self._name, configuration=COSINE, metadata={META_FORMAT: FORMAT}, embedding_function=None
        )

    def _check_collection(self, dimension: int | None) -> None:
        collection = self._collection
        meta = dict(collection.metadata or {})
        if META_FORMAT not in meta:
            if collection.count():
                raise InvalidInputError(
                    f"the Chroma collection {self._name!r} holds entries that memcore did not write; "
                    "open another collection (?collection=...)"
                )
            meta[META_FORMAT] = FORMAT
        if meta[META_FORMAT] != FORMAT:
            raise StoreCorruptedError(
                f"the Chroma collection {self._name!r} is in the format {meta[META_FORMAT]!r}, not {FORMAT!r}"
            )
        configuration = collection.configuration_json or {}
        space = next(
            (
                c["space"]
                for c in (configuration.get("hnsw"), configuration.get("spann"))
                if c and c.get("space")
            ),
            meta.get("hnsw:space", "l2"),
        )
        if space != "cosine":
            raise InvalidInputError(
                f"the Chroma collection {self._name!r} measures {space} distances; memcore needs cosine"
            )
        stored = meta.get(META_DIMENSION)
        if dimension is not None and stored is not None and stored != dimension:
            raise DimensionMismatchError(
                f"the Chroma collection {self._name!r} holds {stored}-dimensional vectors, not {dimension}"
            )
        if dimension is not None:
            meta[META_DIMENSION] = dimension
        self._meta = dict(collection.metadata or {})
        if meta != self._meta:
            self._write_meta(meta)

    def _write_meta(self, updates: dict[str, Any]) -> None:
        meta = {**self._meta, **updates}
        self._collection.modify(metadata=meta)
        self._meta = meta

    # -- plumbing --------------------------------------------------------------

    @property
    def dimension(self) -> int | None:
        value = self._meta.get(META_DIMENSION)
        return value if isinstance(value, int) else None

    def _load_vector_space(self) -> VectorSpace | None:
        embedder, dimension = self._meta.get(META_EMBEDDER), self.dimension
        if embedder is None or dimension is None:
            return None
        return VectorSpace(str(embedder), dimension)

    def _save_vector_space(self, space: VectorSpace) -> None:
        with self._connection.write_lock, translated("binding the vector space"):
            self._write_meta({META_EMBEDDER: space.embedder, META_DIMENSION: space.dimension})

    def _call(self, action: str, operation: Callable[[Collection], T]) -> T:
        """Run ``operation`` on the collection, with errors translated.

        A rebuild (purge) swaps the collection for a copy; a handle still
        pointing at the old one is refreshed once.
        """
        self._check_open()
        with translated(action):
            try:
                return operation(self._collection)
            except NotFoundError:
                self._collection = self._connection.client.get_collection(self._name, embedding_function=None)
                return operation(self._collection)

    def _where(self, scope: Scope, compiled: CompiledFilter, *extra: Where) -> Where | None:
        clauses = scope_clauses(scope)
        if compiled.where is not None:
            clauses.append(compiled.where)
        return all_of([*clauses, *extra])

    def _documents(self, ids: Sequence[str]) -> dict[str, MemoryRecord]:
        found = self._call("reading records", lambda c: c.get(ids=list(ids), include=["documents"]))
        return {i: decode(i, d) for i, d in zip(found["ids"], found["documents"] or [], strict=True)}

    def _candidates(self, where: Where | None) -> list[MemoryRecord]:
        found = self._call("reading records", lambda c: c.get(where=where, include=["documents"]))
        return [decode(i, d) for i, d in zip(found["ids"], found["documents"] or [], strict=True)]

    def _matching_ids(self, scope: Scope, node: Filter | None) -> list[str]:
        compiled = compile_filter(node)
        if compiled.nothing:
            return []
        where = self._where(scope, compiled)
        if compiled.exact:
            return self._call("finding records", lambda c: c.get(where=where, include=[]))["ids"]
        return [str(r.id) for r in self._candidates(where) if evaluate(node, r)]

    # -- writing ---------------------------------------------------------------

    def _add(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        ids = [str(record.id) for record in records]
        with self._connection.write_lock:
            existing = self._call("checking record ids", lambda c: c.get(ids=ids, include=["metadatas"]))
            scopes = {str(record.id): record.scope.as_tuple() for record in records}
            for record_id, meta in zip(existing["ids"], existing["metadatas"] or [], strict=True):
                if stored_scope(dict(meta)) != scopes[record_id]:
                    raise IdConflictError(
                        f"record id {record_id} is already used by a record of another scope"
                    )
            if vectors is None:
                embeddings = placeholder_vectors(len(records), self._placeholder_dimension())
            else:
                self._prepare_dimension(vectors.shape[1])
                embeddings = vectors
            documents = [encode(record) for record in records]
            metadatas = [flat_metadata(record, vectors is not None) for record in records]
            for start in range(0, len(records), PAGE_SIZE):
                batch = slice(start, start + PAGE_SIZE)
                self._call(
                    "writing records",
                    lambda c, batch=batch: c.upsert(  # type: ignore[misc]
                        ids=ids[batch],
                        embeddings=embeddings[batch],
                        documents=documents[batch],
                        metadatas=metadatas[batch],
                    ),
                )

    def _prepare_dimension(self, dimension: int) -> None:
        """Fix the dimension with the first vector; resize the stand-in vectors written before it."""
        if self.dimension not in (None, dimension):
            # BaseStore checked before this thread took the write lock; another may have written since.
            raise DimensionMismatchError(
                f"vector dimension {dimension} does not match the store's {self.dimension}"
            )
        indexed = self._meta.get(META_INDEX_DIMENSION)
        if indexed == dimension and self.dimension == dimension:
            return
        with translated("fixing the vector dimension"):
            if indexed not in (None, dimension):
                self._rebuild(placeholder_dimension=dimension)  # only stand-ins are indexed so far
            self._write_meta({META_DIMENSION: dimension, META_INDEX_DIMENSION: dimension})

    def _placeholder_dimension(self) -> int:
        indexed = self._meta.get(META_INDEX_DIMENSION)
        if isinstance(indexed, int):
            return indexed
        dimension = self.dimension or 1
        with translated("fixing the index dimension"):
            self._write_meta({META_INDEX_DIMENSION: dimension})
        return dimension

    def _delete_ids(self, ids: Sequence[str]) -> int:
        for chunk in _chunks(ids, PAGE_SIZE):
            self._call("deleting records", lambda c, chunk=chunk: c.delete(ids=list(chunk)))  # type: ignore[misc]
        return len(ids)

    def _delete(self, scope: Scope, ids: list[UUID]) -> int:
        wanted = [str(record_id) for record_id in ids]
        with self._connection.write_lock:
            found = self._call(
                "finding records", lambda c: c.get(ids=wanted, where=all_of(scope_clauses(scope)), include=[])
            )
            return self._delete_ids(found["ids"])

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        with self._connection.write_lock:
            return self._delete_ids(self._matching_ids(scope, node))

    # -- reading ---------------------------------------------------------------

    def _get(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        wanted = [str(record_id) for record_id in ids]
        found = self._call(
            "reading records",
            lambda c: c.get(ids=wanted, where=all_of(scope_clauses(scope)), include=["documents"]),
        )
        return [decode(i, d) for i, d in zip(found["ids"], found["documents"] or [], strict=True)]

    def _count(self, scope: Scope, node: Filter | None) -> int:
        return len(self._matching_ids(scope, node))

    def _list(
        self,
        scope: Scope,
        node: Filter | None,
        order: Order,
        limit: int | None,
        before: datetime | None,
        after: datetime | None,
    ) -> list[MemoryRecord]:
        compiled = compile_filter(node)
        if compiled.nothing:
            return []
        bounds: list[Where] = []
        if after is not None:
            bounds.append({CREATED_AT_KEY: {"$gt": epoch_micros(after)}})
        if before is not None:
            bounds.append({CREATED_AT_KEY: {"$lt": epoch_micros(before)}})
        where = self._where(scope, compiled, *bounds)
        descending = order == "desc"
        if limit is None:
            records = [r for r in self._candidates(where) if compiled.exact or evaluate(node, r)]
            return sorted(records, key=_order_key, reverse=descending)
        # Order by the small metadata first, then read only the documents needed.
        found = self._call("listing records", lambda c: c.get(where=where, include=["metadatas"]))
        keys = sorted(
            (
                (meta[CREATED_AT_KEY], i)
                for i, meta in zip(found["ids"], found["metadatas"] or [], strict=True)
            ),
            reverse=descending,
        )
        ordered = [record_id for _, record_id in keys]
        chunk_size = limit if compiled.exact else max(limit * 2, MIN_OVERFETCH)
        result: list[MemoryRecord] = []
        for chunk in _chunks(ordered, chunk_size):
            by_id = self._documents(chunk)
            result += [by_id[i] for i in chunk if compiled.exact or evaluate(node, by_id[i])]
            if len(result) >= limit:
                break
        return result[:limit]

    def _search(
        self, scope: Scope, query: Matrix | None, text: str | None, node: Filter | None, limit: int
    ) -> list[ScoredRecord]:
        compiled = compile_filter(node)
        if compiled.nothing:
            return []

        def wanted(record: MemoryRecord) -> bool:
            return (compiled.exact or evaluate(node, record)) and (
                text is None or text_matches(text, record.message.content)
            )

        if query is None:
            records = [r for r in self._candidates(self._where(scope, compiled)) if wanted(r)]
            records.sort(key=_order_key, reverse=True)
            return [ScoredRecord(record=r, score=1.0) for r in records[:limit]]
        where = self._where(scope, compiled, {VECTOR_KEY: True})
        fetch = limit if compiled.exact and text is None else max(limit * 4, MIN_OVERFETCH)
        while True:
            found = self._call(
                "searching",
                lambda c, n=fetch: c.query(  # type: ignore[misc]
                    query_embeddings=query, n_results=n, where=where, include=["documents", "distances"]
                ),
            )
            ids, documents = found["ids"][0], (found["documents"] or [[]])[0]
            distances = (found["distances"] or [[]])[0]
            hits: list[ScoredRecord] = []
            for record_id, document, distance in zip(ids, documents, distances, strict=True):
                if document is None:
                    continue  # deleted by another thread between Chroma's index lookup and its read
                record = decode(record_id, document)
                if wanted(record):
                    hits.append(ScoredRecord(record=record, score=float(np.clip(1.0 - distance, -1.0, 1.0))))
                    if len(hits) == limit:
                        return hits
            if len(ids) < fetch:
                # Fewer than asked: either every candidate was seen, or HNSW gave up
                # early under a selective filter; then rank the candidates exactly.
                total = self._call(
                    "counting candidates", lambda c: len(c.get(where=where, include=[])["ids"])
                )
                return hits if total <= len(ids) else self._exact_search(where, query, wanted, limit)
            fetch *= 4

    def _exact_search(
        self, where: Where | None, query: Matrix, wanted: Callable[[MemoryRecord], bool], limit: int
    ) -> list[ScoredRecord]:
        """Rank every candidate by cosine similarity with numpy (vectors are stored unit-length)."""
        found = self._call(
            "searching exactly", lambda c: c.get(where=where, include=["embeddings", "documents"])
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
                hits.append(ScoredRecord(record=record, score=float(scores[row])))
                if len(hits) == limit:
                    break
        return hits

    # -- erasure and closing ---------------------------------------------------

    def _rebuild(self, placeholder_dimension: int | None = None) -> None:
        """Copy every live entry into a fresh collection and swap it in (holding the write lock).

        Chroma never removes a deleted vector from its HNSW files; a copy holds
        only the live ones. With ``placeholder_dimension``, the stand-in vectors
        (all there is before the first real vector) are rewritten in that size.
        """
        client, old = self._connection.client, self._collection
        copy_name = self._name + REBUILD_SUFFIX
        if self._find(copy_name) is not None:
            client.delete_collection(copy_name)
        copy = client.create_collection(
            copy_name, configuration=COSINE, metadata=self._meta, embedding_function=None
        )
        offset = 0
        while True:
            page = old.get(include=["embeddings", "documents", "metadatas"], limit=PAGE_SIZE, offset=offset)
            if not page["ids"]:
                break
            count = len(page["ids"])
            embeddings = (
                np.asarray(page["embeddings"], dtype=np.float32)
                if placeholder_dimension is None
                else placeholder_vectors(count, placeholder_dimension)
            )
            copy.upsert(
                ids=page["ids"],
                embeddings=embeddings,
                documents=page["documents"],
                metadatas=page["metadatas"],
            )
            offset += count
        client.delete_collection(self._name)
        copy.modify(name=self._name)
        self._collection = copy

    def purge(self) -> None:
        """Physically erase deleted records: rebuild the collection without them.

        Embedded stores then drop the index folders Chroma leaves behind and
        compact its SQLite file (``VACUUM``). A server's files are its own: run
        ``chroma vacuum`` there (which compacts SQLite but keeps HNSW files;
        the rebuild here is what drops the deleted vectors from the index).
        """
        self._check_open()
        with self._connection.write_lock:
            self._check_open()
            with translated("purging deleted records"):
                self._rebuild()
            if self._connection.persist_path is not None:
                erasure.compact_persist_directory(self._connection.persist_path)

    def _close(self) -> None:
        self._connection.release()


class ChromaStore(ChromaStoreBase):
    """An embedded, durable Chroma store in a folder (``chroma:///path``).

    One process at a time: a second process gets
    :class:`~memcore.errors.StoreLockedError`. Stores of one process on one
    folder (other collections, or the same one) share a single client.

    :param path: the persist directory; created if missing.
    :param collection: the collection name (default ``memcore``).
    :param dimension: fix the vector dimension up front.
    """

    name: ClassVar[str] = "chroma"
    schemes: ClassVar[tuple[str, ...]] = ("chroma",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, ann=True)

    def __init__(
        self, path: str | Path, *, collection: str = DEFAULT_COLLECTION, dimension: int | None = None
    ) -> None:
        check_collection_name(collection)
        super().__init__(connection.persistent(Path(path)), collection, dimension)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Open ``chroma:///abs/path`` or ``chroma://rel/path`` (``?collection=``, ``?dimension=``)."""
        location, params = urls.embedded_path(url)
        return cls(
            location,
            collection=params.get("collection", DEFAULT_COLLECTION),
            dimension=urls.dimension_param(params),
        )


class ChromaMemoryStore(ChromaStoreBase):
    """An in-memory Chroma store (``chroma+memory://``), lost when closed.

    chromadb shares one in-memory system per process, so each store gets a
    collection of its own (a random name), dropped by :meth:`close`.

    :param dimension: fix the vector dimension up front.
    """

    name: ClassVar[str] = "chroma-memory"
    schemes: ClassVar[tuple[str, ...]] = ("chroma+memory",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=False, ann=True)

    def __init__(self, *, dimension: int | None = None) -> None:
        super().__init__(connection.ephemeral(), f"memcore-{uuid4().hex}", dimension)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Open ``chroma+memory://`` (nothing may follow the scheme)."""
        if url.rstrip("/") not in ("chroma+memory:", "chroma+memory:/"):
            raise InvalidInputError(
                f"the in-memory Chroma store's URL is just 'chroma+memory://', got {url!r}"
            )
        return cls()

    def _close(self) -> None:
        try:
            with translated("dropping the in-memory collection"):
                self._connection.client.delete_collection(self._name)
        finally:
            super()._close()


class ChromaHttpStore(ChromaStoreBase):
    """A store in a Chroma server (``chroma+http://host:port``, ``chroma+https://``).

    A server that is down or restarting raises
    :class:`~memcore.errors.StoreUnavailableError`; the next call after it is
    back succeeds.

    :param address: the server, tenant and database.
    :param collection: the collection name (default ``memcore``).
    :param dimension: fix the vector dimension up front.
    """

    name: ClassVar[str] = "chroma-http"
    schemes: ClassVar[tuple[str, ...]] = ("chroma+http", "chroma+https")
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, ann=True, server=True)

    def __init__(
        self,
        address: urls.ServerAddress,
        *,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
    ) -> None:
        check_collection_name(collection)
        super().__init__(
            connection.http(address.host, address.port, address.ssl, address.tenant, address.database),
            collection,
            dimension,
        )

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Open ``chroma+http(s)://host:port``.

        Parameters: ``?collection=``, ``?dimension=``, ``?tenant=``, ``?database=``.
        """
        address, params = urls.server_address(url)
        return cls(
            address,
            collection=params.get("collection", DEFAULT_COLLECTION),
            dimension=urls.dimension_param(params),
        )
