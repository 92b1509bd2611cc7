"""The Chroma stores: embedded (``chroma://``), in memory (``chroma+memory://``), server (``chroma+http://``).

All three share :class:`ChromaStoreBase`; they differ in how they connect
(:mod:`memcore_chroma.connection`) and in their capabilities. One memcore
store is one Chroma collection (cosine space) holding records laid out as
:mod:`memcore_chroma.encoding` describes; the collection's metadata keeps the
format, the vector dimension and the embedder binding, so they survive reopen.
A record is its exact scope plus its id: its entry is named by both
(:func:`~memcore_chroma.encoding.entry_id`), and reads by id select on the
record's id in the entry's metadata within the scope, so that a wide scope finds
the id's record in each of its exact scopes.

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

import contextlib
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, Self, TypeVar
from uuid import UUID, uuid4

import numpy as np
from chromadb.api.models.Collection import Collection
from chromadb.errors import NotFoundError

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidInputError,
    MemcoreError,
    StoreError,
    StoreFullError,
)
from memcore.filters import Comparison, Filter
from memcore.kit import check_same_dimension, clamp_score, order_key
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord, epoch_micros
from memcore.scope import Scope
from memcore.store import BaseStore, Capabilities, VectorSpace, text_matches
from memcore.urls import COLLECTION, StoreURL
from memcore.validation import Matrix, check_dimension
from memcore_chroma import connection, erasure, recovery, urls
from memcore_chroma.connection import Connection
from memcore_chroma.encoding import (
    CREATED_AT_KEY,
    RECORD_ID_KEY,
    VECTOR_KEY,
    Where,
    all_of,
    decode,
    decode_found,
    encode,
    entry_id,
    flat_metadata,
    placeholder_vectors,
    scope_clauses,
)
from memcore_chroma.errors import ExclusiveMaintenanceError, partly_written, translated
from memcore_chroma.filters import CompiledFilter, compile_filter, expresses
from memcore_chroma.opening import (
    DEFAULT_COLLECTION,
    FORMAT,
    META_DIMENSION,
    META_EMBEDDER,
    META_FORMAT,
    META_INDEX_DIMENSION,
    META_SCOPE_KEYS,
    REBUILD_SUFFIX,
    Meta,
    backfill_scope_keys,
    check_collection_name,
    check_ef_search,
    checked_metadata,
    configuration,
    ef_search_of,
    find,
    int_value,
    migrate_entry_ids,
    open_collection,
    settled,
)

__all__ = [
    "ChromaHttpStore",
    "ChromaMemoryStore",
    "ChromaStore",
    "ChromaStoreBase",
    "check_collection_name",
]

PAGE_SIZE = 1_000
"""Entries per request when copying a collection or writing a large batch."""
FULL_DISK_MARGIN = 64 * 2**20
"""Free bytes under which a failed embedded write is taken for a full disk (Chroma's error does not say)."""
MIN_OVERFETCH = 64
"""Candidates fetched at least when a search must post-filter; then 4 times more per round."""

LISTING_SAMPLE = 2
"""An ordered read with a limit first times the ``LISTING_SAMPLE * limit`` records inserted last
(or first) to bound what it reads (see :meth:`ChromaStoreBase._newest_or_oldest`)."""

T = TypeVar("T")


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ChromaStoreBase(BaseStore):
    """What the three Chroma stores share: everything but connecting.

    Subclasses check their arguments before they connect (a refused value must not create a
    folder or take its lock).

    :param chroma: the client to use; released by :meth:`close`.
    :param collection: the collection holding this store's records (created if missing);
        a valid name (:func:`~memcore_chroma.opening.check_collection_name`).
    :param dimension: fix the vector dimension up front; an existing collection
        of another dimension raises :class:`~memcore.errors.DimensionMismatchError`.
    :param ef_search: the candidates Chroma's HNSW search explores (Chroma's default: 100), a
        setting of the collection (:meth:`_set_ef_search`); ``None`` leaves it as it is.
    """

    rebuilds_safely: bool = True
    """Whether this process is the collection's only user, so that a rebuild loses no one's writes."""

    def __init__(
        self, chroma: Connection, collection: str, dimension: int | None, ef_search: int | None = None
    ) -> None:
        super().__init__()
        self._connection = chroma
        self._name = collection
        self._meta: Meta = {}
        try:
            with chroma.write_lock, translated(f"opening the Chroma collection {collection!r}"):
                with chroma.reading():
                    self._generation = chroma.generation
                    self._collection = open_collection(
                        chroma.client, collection, create=True, ef_search=ef_search
                    )
                    self._meta = dict(self._collection.metadata or {})
                    meta = checked_metadata(self._collection, collection, dimension)
                    if meta.get(META_SCOPE_KEYS) is not True:
                        backfill_scope_keys(self._collection)
                        meta[META_SCOPE_KEYS] = True
                    if meta[META_FORMAT] != FORMAT:
                        migrate_entry_ids(self._collection)
                        meta[META_FORMAT] = FORMAT
                if meta != self._meta:
                    self._write_meta(meta)
                if ef_search is not None and ef_search_of(self._collection) != ef_search:
                    self._set_ef_search(ef_search)
        except BaseException:
            chroma.release()
            raise

    def _set_ef_search(self, ef_search: int) -> None:
        """Change the collection's ``ef_search`` (hold the write lock).

        Chroma reads it when it loads a collection's index, and keeps a loaded index as it is: the
        embedded client is therefore restarted, so that this process searches with the new value
        at once. A server applies it when it next loads the index (after a restart).
        """
        with self._connection.reading():
            self._handle().modify(configuration={"hnsw": {"ef_search": ef_search}})
        if self._connection.persist_path is not None:
            with self._connection.exclusive():
                self._connection.restart(lambda: None)

    # -- the collection and its metadata -------------------------------------

    def _handle(self) -> Collection:
        """The collection handle, fetched anew if the client or the collection was swapped (hold reading)."""
        generation = self._connection.generation
        if self._generation != generation:
            self._collection = self._connection.client.get_collection(self._name, embedding_function=None)
            self._generation = generation
        return self._collection

    def _recover(self) -> None:
        """Find the collection again after Chroma said it is gone: a rebuild swapped it, or stopped."""
        with self._connection.write_lock, self._connection.reading():
            generation = self._connection.generation
            self._collection = open_collection(self._connection.client, self._name, create=False)
            self._generation = generation

    def _call(self, action: str, operation: Callable[[Collection], T]) -> T:
        """Run ``operation`` on the collection, with errors translated.

        A rebuild swaps the collection for a copy (here or in another process);
        a handle still pointing at the old one is found again once, finishing
        an interrupted rebuild if need be.
        """
        self._check_open()
        with translated(action):
            with self._connection.reading():
                try:
                    return operation(self._handle())
                except NotFoundError:
                    pass
            self._recover()  # not while reading: it takes the write lock
            with self._connection.reading():
                return operation(self._handle())

    def _fresh_meta(self) -> Meta:
        """The collection's metadata as stored now (other stores may have changed it)."""

        def read(_: Collection) -> Meta:
            fresh = self._connection.client.get_collection(self._name, embedding_function=None)
            self._collection = fresh
            return dict(fresh.metadata or {})

        self._meta = self._call("reading the collection's metadata", read)
        return self._meta

    def _write_meta(self, updates: Meta) -> None:
        """Merge ``updates`` into the stored metadata (hold the write lock)."""
        fresh = self._fresh_meta()
        meta = {**fresh, **updates}
        if meta != fresh:
            self._call("writing the collection's metadata", lambda c: c.modify(metadata=meta))
            self._meta = meta

    @property
    def dimension(self) -> int | None:
        value = int_value(self._meta, META_DIMENSION)
        if value is None and not self.closed:
            value = int_value(self._fresh_meta(), META_DIMENSION)  # set since by another store?
        return value

    def _load_vector_space(self) -> VectorSpace | None:
        meta = self._meta
        if meta.get(META_EMBEDDER) is None and not self.closed:
            meta = self._fresh_meta()
        embedder, dimension = meta.get(META_EMBEDDER), int_value(meta, META_DIMENSION)
        if embedder is None or dimension is None:
            return None
        return VectorSpace(str(embedder), dimension)

    def _save_vector_space(self, space: VectorSpace) -> None:
        with self._connection.write_lock:
            meta = self._fresh_meta()
            embedder, dimension = meta.get(META_EMBEDDER), int_value(meta, META_DIMENSION)
            if embedder is not None and (embedder, dimension) != (space.embedder, space.dimension):
                raise EmbedderMismatchError(
                    f"the {self.name} store holds vectors of the embedder {embedder!r} "
                    f"({dimension} dimensions), not {space.embedder!r} ({space.dimension}); "
                    "use a store of its own for another embedder, or migrate and re-embed"
                )
            if dimension not in (None, space.dimension):
                raise EmbedderMismatchError(
                    f"the {self.name} store holds {dimension}-dimensional vectors; "
                    f"the embedder {space.embedder!r} makes {space.dimension}"
                )
            self._write_meta({META_EMBEDDER: space.embedder, META_DIMENSION: space.dimension})

    # -- plumbing --------------------------------------------------------------

    def _where(self, scope: Scope, compiled: CompiledFilter, *extra: Where) -> Where | None:
        clauses = scope_clauses(scope)
        if compiled.where is not None:
            clauses.append(compiled.where)
        return all_of([*clauses, *extra])

    def _candidates(self, where: Where | None, ids: Sequence[str] | None = None) -> list[MemoryRecord]:
        """The records ``where`` selects (among ``ids``, if given)."""
        chosen = None if ids is None else list(ids)
        return decode_found(
            self._call("reading records", lambda c: c.get(ids=chosen, where=where, include=["documents"]))
        )

    def _matching_entries(self, scope: Scope, node: Filter | None) -> tuple[list[str], Where | None]:
        """The entry ids of the records in ``scope`` that match ``node``, and a ``where`` selecting them."""
        compiled = compile_filter(node)
        if compiled.nothing:
            return [], None
        where = self._where(scope, compiled)
        if compiled.exact:
            return self._call("finding records", lambda c: c.get(where=where, include=[]))["ids"], where
        return [entry_id(r) for r in self._candidates(where) if compiled.admits(node, r)], where

    @staticmethod
    def _of_ids(scope: Scope, ids: list[UUID]) -> Iterator[Where | None]:
        """``where`` documents selecting the records of ``ids`` in ``scope``, in every exact scope
        within it (:data:`PAGE_SIZE` ids each)."""
        for chunk in _chunks(ids, PAGE_SIZE):
            yield all_of([*scope_clauses(scope), {RECORD_ID_KEY: {"$in": [str(i) for i in chunk]}}])

    # -- writing ---------------------------------------------------------------

    def _add(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        entries = [entry_id(record) for record in records]
        with self._connection.write_lock:
            existing = self._call(
                "reading replaced records", lambda c: c.get(ids=entries, include=["metadatas"])
            )
            previous = {
                entry: set(meta)
                for entry, meta in zip(existing["ids"], existing["metadatas"] or [], strict=True)
            }
            meta = self._meta if settled(self._meta) else self._fresh_meta()
            if vectors is None:
                embeddings, updates = self._stand_ins(meta, len(records))
            else:
                updates = self._prepare_dimension(meta, vectors.shape[1])
                embeddings = vectors
            documents = [encode(record) for record in records]
            metadatas = [flat_metadata(record, vectors is not None) for record in records]
            for entry, flat in zip(entries, metadatas, strict=True):
                # Chroma's upsert merges metadata into the entry's: a key the new version lacks
                # would keep the old value (and match filters on it) unless removed with None.
                for key in previous.get(entry, set()) - flat.keys():
                    flat[key] = None  # type: ignore[assignment]
            written = 0
            try:
                for start in range(0, len(records), PAGE_SIZE):
                    batch = slice(start, start + PAGE_SIZE)
                    with self._undone_on_failure(entries[batch]):
                        self._call(
                            "writing records",
                            lambda c, batch=batch: c.upsert(  # type: ignore[misc]
                                ids=entries[batch],
                                embeddings=embeddings[batch],
                                documents=documents[batch],
                                metadatas=metadatas[batch],
                            ),
                        )
                    written = min(start + PAGE_SIZE, len(records))
            except MemcoreError as error:
                if not written:
                    raise
                # Chroma takes at most a few thousand entries a call, and an applied one cannot
                # be taken back on a full disk: say exactly what of the batch is stored.
                with contextlib.suppress(MemcoreError):
                    if updates:
                        self._write_meta(updates)
                raise partly_written(error, written, len(records)) from error
            if updates:  # only once the records are in: a failed add changes no metadata
                self._write_meta(updates)

    def _stand_ins(self, meta: Meta, count: int) -> tuple[np.ndarray, Meta]:
        """Stand-in vectors in the size the index holds (the dimension, if known, before any)."""
        indexed = int_value(meta, META_INDEX_DIMENSION)
        if indexed is not None:
            return placeholder_vectors(count, indexed), {}
        size = int_value(meta, META_DIMENSION) or 1
        return placeholder_vectors(count, size), {META_INDEX_DIMENSION: size}

    def _prepare_dimension(self, meta: Meta, dimension: int) -> Meta:
        """Check the first vectors' dimension; resize the stand-in vectors written before them.

        :returns: the metadata to write once the vectors are in.
        """
        stored, indexed = int_value(meta, META_DIMENSION), int_value(meta, META_INDEX_DIMENSION)
        # BaseStore checked a cached dimension; another store may have fixed it since.
        check_same_dimension(stored, dimension)
        if indexed not in (None, dimension):
            # Only stand-ins are indexed so far, in another size: Chroma fixed the index's dimension.
            if not self.rebuilds_safely:
                raise ExclusiveMaintenanceError(
                    f"the Chroma collection {self._name!r} holds records without vectors, indexed at "
                    f"dimension {indexed}; storing {dimension}-dimensional vectors needs a rebuild, which "
                    "would lose other clients' concurrent writes. During maintenance (no other client "
                    f"using it) call rebuild_exclusively(dimension={dimension}); or open the collection with "
                    "?dimension= (or bind the embedder) before writing records without vectors"
                )
            with translated("fixing the vector dimension"):
                self._rebuild({**meta, META_INDEX_DIMENSION: dimension}, placeholder_dimension=dimension)
        return {
            key: dimension
            for key in (META_DIMENSION, META_INDEX_DIMENSION)
            if int_value(meta, key) != dimension
        }

    def _delete_ids(self, ids: Sequence[str], where: Where | None) -> int:
        """Delete these entries, but only where ``where`` still holds (another writer may have moved one).

        Returns the count Chroma reports where it reports one, else how many ids were given.
        """
        deleted = 0
        for chunk in _chunks(ids, PAGE_SIZE):
            with self._undone_on_failure(list(chunk)):
                result = self._call(
                    "deleting records",
                    lambda c, chunk=chunk: c.delete(ids=list(chunk), where=where),  # type: ignore[misc]
                )
            count = result.get("deleted") if self._connection.counts_deletes and result else None
            deleted += count if isinstance(count, int) else len(chunk)
        return deleted

    @contextmanager
    def _undone_on_failure(self, ids: list[str]) -> Iterator[None]:
        """Embedded: if the block's write raises, take its entries out of Chroma's log (hold the
        write lock).

        Chroma logs a write before applying it; on a full disk applying fails, the call raises,
        and the logged entries were applied at the next open anyway (a batch that raised, stored)
        and blocked every later write meanwhile. The client is restarted without them (and the
        vector indexes rebuilt from the log), so a write that raised changed nothing. Chroma's
        error does not name the cause ("Failed to apply logs"): with less than
        :data:`FULL_DISK_MARGIN` free on the store's filesystem it is a
        :class:`~memcore.errors.StoreFullError`.
        """
        try:
            yield
        except StoreError as error:
            path = self._connection.persist_path
            if path is None:
                raise
            collection_id = str(self._collection.id)

            def drop() -> None:
                recovery.drop_unapplied(path, collection_id, ids)
                if (path / recovery.LOG_COMPLETE).exists():
                    recovery.reset_vector_indexes(path)

            with self._connection.exclusive():
                self._connection.restart(drop)
            free = shutil.disk_usage(path).free
            if isinstance(error, StoreFullError) or free >= FULL_DISK_MARGIN:
                raise
            raise StoreFullError(
                f"{error} -- the filesystem of {path} has {free / 2**20:.1f} MiB free: free space and retry"
            ) from error

    def _delete(self, scope: Scope, ids: list[UUID]) -> int:
        with self._connection.write_lock:
            entries = [
                entry
                for where in self._of_ids(scope, ids)
                for entry in self._call(
                    "finding records",
                    lambda c, where=where: c.get(where=where, include=[]),  # type: ignore[misc]
                )["ids"]
            ]
            return self._delete_ids(entries, all_of(scope_clauses(scope)))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        with self._connection.write_lock:
            entries, where = self._matching_entries(scope, node)
            return self._delete_ids(entries, where)

    # -- reading ---------------------------------------------------------------

    def _get(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        return [record for where in self._of_ids(scope, ids) for record in self._candidates(where)]

    def _vectors(self, scope: Scope, ids: list[UUID]) -> list[tuple[UUID, Matrix]]:
        found: list[tuple[UUID, Matrix]] = []
        for where in self._of_ids(scope, ids):
            page = self._call(
                "reading vectors",
                lambda c, where=where: c.get(where=where, include=["embeddings", "metadatas"]),  # type: ignore[misc]
            )
            embeddings = page["embeddings"] if page["embeddings"] is not None else []
            found += [
                (UUID(str(meta[RECORD_ID_KEY])), np.asarray(vector, dtype=np.float32))
                for vector, meta in zip(embeddings, page["metadatas"] or [], strict=True)
                if meta.get(VECTOR_KEY) is True  # records without a vector hold a stand-in
            ]
        return found

    def _count(self, scope: Scope, node: Filter | None) -> int:
        return len(self._matching_entries(scope, node)[0])

    def _expresses(self, comparison: Comparison) -> bool:
        return expresses(comparison)

    def _list(self, scope: Scope, query: ListQuery) -> list[MemoryRecord]:
        node, limit = query.filter, query.limit
        compiled = compile_filter(node)
        if compiled.nothing:
            return []
        bounds: list[Where] = []
        if query.after is not None:
            bounds.append({CREATED_AT_KEY: {"$gt": epoch_micros(query.after)}})
        if query.before is not None:
            bounds.append({CREATED_AT_KEY: {"$lt": epoch_micros(query.before)}})
        where = self._where(scope, compiled, *bounds)
        descending = query.order == "desc"
        if limit is None:
            records = [r for r in self._candidates(where) if compiled.admits(node, r)]
            return sorted(records, key=order_key, reverse=descending)
        newest_or_oldest = self._newest_or_oldest(where, limit, descending) if compiled.exact else None
        if newest_or_oldest is not None:
            return sorted(newest_or_oldest, key=order_key, reverse=descending)[:limit]
        # Order by the small metadata first, then read only the documents needed.
        found = self._call("listing records", lambda c: c.get(where=where, include=["metadatas"]))
        # (time, record id) as order_key orders records; the entry id only settles two scopes' namesakes.
        keys = sorted(
            (
                (meta[CREATED_AT_KEY], str(meta[RECORD_ID_KEY]), i)
                for i, meta in zip(found["ids"], found["metadatas"] or [], strict=True)
            ),
            reverse=descending,
        )
        ordered = [entry for _, _, entry in keys]
        chunk_size = limit if compiled.exact else max(limit * 2, MIN_OVERFETCH)
        result: list[MemoryRecord] = []
        for chunk in _chunks(ordered, chunk_size):
            # Scoped again: a record deleted (and its id reused elsewhere) since is skipped.
            by_id = {entry_id(r): r for r in self._candidates(where, chunk)}
            result += [by_id[i] for i in chunk if i in by_id and compiled.admits(node, by_id[i])]
            if len(result) >= limit:
                break
        return result[:limit]

    def _newest_or_oldest(
        self, where: Where | None, limit: int, descending: bool
    ) -> list[MemoryRecord] | None:
        """Records ``where`` selects, among them its ``limit`` newest (``descending``) or oldest;
        ``None`` if records were deleted meanwhile.

        Chroma cannot order by a field, and sorting means reading the metadata of the whole scope
        (an agent's whole history, for its recent window). Its ids come in insertion order, and
        reading them alone is cheap: the last (or first) ``LISTING_SAMPLE * limit`` inserted give a
        time bound that at least that many records reach, and every record beyond the bound is read,
        so the answer does not depend on that order: records inserted far out of time order (an
        import of old records last) make the read larger, up to every match, as when sorting them all.
        No more than ``LISTING_SAMPLE * limit`` matches are read whole.
        """
        ids = self._call("listing ids", lambda c: c.get(where=where, include=[]))["ids"]
        size = LISTING_SAMPLE * limit
        if len(ids) <= size:
            return self._candidates(where)
        sample = ids[-size:] if descending else ids[:size]
        # Read without ``where`` (by id, cheap): only their times are used, as the bound.
        sampled = self._call("sampling times", lambda c: c.get(ids=sample, include=["metadatas"]))
        times = [int(meta[CREATED_AT_KEY]) for meta in sampled["metadatas"] or []]  # type: ignore[arg-type]
        if not times:
            return None  # all deleted meanwhile
        bound: Where = (
            {CREATED_AT_KEY: {"$gte": min(times)}} if descending else {CREATED_AT_KEY: {"$lte": max(times)}}
        )
        bounded = all_of([where, bound] if where is not None else [bound])
        records = self._candidates(bounded)
        return records if len(records) >= limit else None

    def _search(self, scope: Scope, request: SearchQuery) -> list[ScoredRecord]:
        query, text, node, limit = request.vector, request.text, request.filter, request.limit
        compiled = compile_filter(node)
        if compiled.nothing:
            return []

        def wanted(record: MemoryRecord) -> bool:
            return compiled.admits(node, record) and (
                text is None or text_matches(text, record.message.content)
            )

        if query is None:
            records = [r for r in self._candidates(self._where(scope, compiled)) if wanted(r)]
            records.sort(key=order_key, reverse=True)
            return [ScoredRecord.of(r, 1.0) for r in records[:limit]]
        if not self._indexes_vectors_of(query.shape[1]):
            return []
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
                    hits.append(ScoredRecord.of(record, clamp_score(1.0 - distance)))
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

    def _indexes_vectors_of(self, dimension: int) -> bool:
        """Whether the index may hold vectors of ``dimension``.

        Before the first real vector, the index may hold only stand-ins, in
        another size (the dimension was bound after they were written): then
        no record has a vector, and Chroma would refuse the query.
        """
        indexed = int_value(self._meta, META_INDEX_DIMENSION)
        if indexed in (None, dimension):
            return True
        return int_value(self._fresh_meta(), META_INDEX_DIMENSION) in (None, dimension)

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
                hits.append(ScoredRecord.of(record, float(scores[row])))
                if len(hits) == limit:
                    break
        return hits

    # -- rebuilding, erasure and closing ---------------------------------------

    def _rebuild(self, meta: Meta, placeholder_dimension: int | None = None) -> None:
        """Copy every live entry into a fresh collection and swap it in (hold the write lock).

        Chroma never removes a deleted vector from its HNSW files; a copy holds
        only the live ones. With ``placeholder_dimension``, the stand-in vectors
        (all there is before the first real vector) are rewritten in that size.
        The copy is made while other threads keep reading; the swap (drop the
        old collection, rename the copy) holds exclusive access, and then every
        store on this client fetches its handle anew.
        """
        chroma, copy_name = self._connection, self._name + REBUILD_SUFFIX
        with chroma.reading():
            client, old = chroma.client, self._handle()
            if find(client, copy_name) is not None:
                client.delete_collection(copy_name)
            # The copy keeps the collection's ef_search, the one HNSW setting memcore lets users change.
            settings = configuration(ef_search_of(old))
            copy = client.create_collection(
                copy_name, configuration=settings, metadata=meta, embedding_function=None
            )
            offset = 0
            while True:
                page = old.get(
                    include=["embeddings", "documents", "metadatas"], limit=PAGE_SIZE, offset=offset
                )
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
        with chroma.exclusive():
            chroma.handles_changed()
            client.delete_collection(self._name)
            copy.modify(name=self._name)
        self._meta = meta

    def _rebuild_collection(self, dimension: int | None) -> None:
        """Rebuild the collection (hold the write lock); resize stand-ins to ``dimension`` or the store's."""
        with translated("rebuilding the collection"):
            meta = self._fresh_meta()
            stored = int_value(meta, META_DIMENSION)
            if dimension is not None and stored not in (None, dimension):
                raise DimensionMismatchError(
                    f"the Chroma collection {self._name!r} holds {stored}-dimensional vectors, "
                    f"not {dimension}"
                )
            target = dimension or stored
            resize = target is not None and int_value(meta, META_INDEX_DIMENSION) not in (None, target)
            if target is not None:
                meta = {**meta, META_DIMENSION: target}
                if resize:
                    meta[META_INDEX_DIMENSION] = target
            self._rebuild(meta, placeholder_dimension=target if resize else None)

    def purge(self) -> None:
        """Physically erase deleted records: rebuild the collection without them.

        Embedded stores then drop the index folders Chroma leaves behind,
        compact its SQLite file (``VACUUM``), rebuild the vector indexes from the
        purged log and zero the spare slots of their files, with Chroma's client
        closed meanwhile: other threads' calls wait until it is reopened.
        """
        self._check_open()
        with self._connection.write_lock:
            self._check_open()
            self._rebuild_collection(None)
            path = self._connection.persist_path
            if path is not None:
                with self._connection.exclusive():
                    self._connection.restart(lambda: _compact_and_reindex(path))
                    self._rebuild_vector_indexes()
                    self._connection.restart(lambda: erasure.scrub_vector_indexes(path))
                connection.make_private(path)

    def _rebuild_vector_indexes(self) -> None:
        """Have Chroma build every collection's vector index from its log now, so that the
        files exist to be scrubbed (Chroma makes them at a collection's first read)."""
        with translated("rebuilding the vector indexes"):
            for collection in self._connection.client.list_collections():
                collection.count()

    def _close(self) -> None:
        self._connection.release()


_inherited: list[Connection] = []
"""Server connections a forked child inherited: never used, closed or collected there."""


def _connect(address: urls.ServerAddress) -> Connection:
    return connection.http(address.host, address.port, address.ssl, address.tenant, address.database)


def _compact_and_reindex(path: Path) -> None:
    """Compact the folder, then drop its vector index files for Chroma to rebuild from the log.

    chromadb writes its index files from buffers that can hold bytes of deleted records (a deleted
    record's content and id inside ``data_level0.bin`` after a purge); rebuilt from the purged log,
    they cannot.
    """
    erasure.compact_persist_directory(path)
    if (path / recovery.LOG_COMPLETE).exists():
        recovery.reset_vector_indexes(path)


class ChromaStore(ChromaStoreBase):
    """An embedded, durable Chroma store in a folder (``chroma:///path``).

    One process at a time: a second process gets
    :class:`~memcore.errors.StoreLockedError`. Stores of one process on one
    folder (other collections, or the same one) share a single client.

    :param path: the persist directory; created if missing.
    :param collection: the collection name (default ``memcore``).
    :param dimension: fix the vector dimension up front.
    :param ef_search: set the collection's HNSW ``ef_search`` (kept with the collection).
    """

    name: ClassVar[str] = "chroma"
    schemes: ClassVar[tuple[str, ...]] = ("chroma",)
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, ann=True)

    def __init__(
        self,
        path: str | Path,
        *,
        collection: str = DEFAULT_COLLECTION,
        dimension: int | None = None,
        ef_search: int | None = None,
    ) -> None:
        check_collection_name(collection)
        check_dimension(dimension)
        check_ef_search(ef_search)
        super().__init__(connection.persistent(Path(path)), collection, dimension, ef_search)

    url_params: ClassVar[frozenset[str]] = urls.EMBEDDED_PARAMS

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``chroma:///abs/path`` or ``chroma://rel/path`` (``?collection=``, ``?dimension=``,
        ``?ef_search=``)."""
        return cls(
            url.location(),
            collection=url.text_param(COLLECTION, DEFAULT_COLLECTION),
            dimension=urls.dimension_param(url),
            ef_search=urls.ef_search_param(url),
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
        check_dimension(dimension)
        super().__init__(connection.ephemeral(), f"memcore-{uuid4().hex}", dimension)

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``chroma+memory://`` (nothing may follow the scheme)."""
        url.require_empty_location()
        return cls()

    def _close(self) -> None:
        try:
            with translated("dropping the in-memory collection"), self._connection.reading():
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
    :param ef_search: set the collection's HNSW ``ef_search`` (kept with the collection; a running
        server applies a change to an existing collection when it next loads its index).
    :param exclusive: promise that this store is the collection's only client (no other
        process, host or client uses it): then ``purge()`` and the first vector after stand-ins
        of another size rebuild the collection, as :meth:`rebuild_exclusively` does, instead of
        raising :class:`~memcore_chroma.ExclusiveMaintenanceError`.
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
        ef_search: int | None = None,
        exclusive: bool = False,
    ) -> None:
        check_collection_name(collection)
        check_dimension(dimension)
        check_ef_search(ef_search)
        if not isinstance(exclusive, bool):
            raise InvalidInputError(f"exclusive must be a bool, got {exclusive!r}")
        self._address = address
        self.rebuilds_safely = exclusive
        super().__init__(_connect(address), collection, dimension, ef_search)

    url_params: ClassVar[frozenset[str]] = urls.SERVER_PARAMS

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``chroma+http(s)://host:port``.

        Parameters: ``?collection=``, ``?dimension=``, ``?ef_search=``, ``?tenant=``, ``?database=``,
        ``?exclusive=``.
        """
        address, _ = urls.server_address(url)
        return cls(
            address,
            collection=url.text_param(COLLECTION, DEFAULT_COLLECTION),
            dimension=urls.dimension_param(url),
            ef_search=urls.ef_search_param(url),
            exclusive=url.flag("exclusive"),
        )

    def _reconnect_in_child(self) -> None:
        """In a forked child: a new client of the child's own, with fresh locks.

        The inherited client's HTTP connections are the parent's sockets: a request on them could
        read the parent's reply (another scope's records). It is dropped without being closed
        (closing would shut the parent's connections) and kept from the garbage collector.
        Each chromadb ``HttpClient`` has a system, and so an HTTP connection pool, of its own
        (chromadb keys HTTP systems by a random id, never by settings), so nothing is shared.
        """
        _inherited.append(self._connection)
        self._connection = _connect(self._address)
        self._generation = -1  # fetch the collection handle anew, through the new client

    def purge(self) -> None:
        """Refused: on a server, a rebuild would lose other clients' concurrent writes.

        Run :meth:`rebuild_exclusively` during maintenance instead, and the
        server's ``chroma vacuum`` to compact its SQLite file.

        With ``exclusive=True`` (``?exclusive=true``: this store is the collection's only
        client), it is :meth:`rebuild_exclusively`.

        :raises ExclusiveMaintenanceError: unless the store was opened exclusive.
        """
        self._check_open()
        if self.rebuilds_safely:
            self.rebuild_exclusively()
            return
        raise ExclusiveMaintenanceError(
            f"purge() rebuilds the Chroma collection {self._name!r}, which on a server loses what other "
            "clients write meanwhile; during maintenance (no other client using the collection) call "
            "ChromaHttpStore.rebuild_exclusively() instead, then `chroma vacuum` on the server"
        )

    def rebuild_exclusively(self, dimension: int | None = None) -> None:
        """Rebuild the collection without its deleted records: the server form of :meth:`purge`.

        Only while no other client (process, host, or store object on another
        client) uses the collection: what they write during the rebuild is
        lost, and their handles move to the new collection on their next call.

        :param dimension: the vector dimension to resize the stand-in vectors of
            records without one to (needed when they were written before the
            dimension was known and vectors of another size are to come);
            defaults to the store's dimension, if known.
        :raises DimensionMismatchError: if the store holds vectors of another dimension.
        """
        self._check_open()
        check_dimension(dimension)
        with self._connection.write_lock:
            self._check_open()
            self._rebuild_collection(dimension)
