"""What the Chroma stores share: the memcore contract over one Chroma collection.

The three stores (:mod:`memcore_chroma.deployments`: embedded ``chroma://``, in memory
``chroma+memory://``, server ``chroma+http://``) differ only in how they connect
(:mod:`memcore_chroma.connection`) and in their capabilities. One memcore
store is one Chroma collection (cosine space) holding records laid out as
:mod:`memcore_chroma.encoding` describes; the collection's metadata keeps the
format, the vector dimension and the embedder binding, so they survive reopen.
A record is its exact scope plus its id: its entry is named by both
(:func:`~memcore_chroma.encoding.entry_id`), and reads by id select on the
record's id in the entry's metadata within the scope, so that a wide scope finds
the id's record in each of its exact scopes.

Reads compile the scope and the filter into one ``where``
(:mod:`memcore_chroma.filters`). The implicit read condition, ``expires_at > now`` (the store's
:attr:`~memcore.store.BaseStore.clock`, a client-side value), is sent beside them only by the
reads that decode nothing (counts, ``scopes()``): it matches nearly every entry, and Chroma
evaluates each clause over every entry it matches, so the other reads check it on each record
they decode (:meth:`ChromaStoreBase._alive`); deletes leave it out, so that they reach
expired records (``sweep()``, ``purge()``). Reads that know their entries' ids (an exact scope's,
a window's) read them by id, which Chroma looks up without evaluating a ``where``. When the
``where`` is exact, counts and limits go to Chroma as they are; when it is a superset, candidates are
fetched (over-fetching, then fetching more until ``limit`` hits or no more
candidates) and post-filtered with :func:`memcore.filters.evaluate`
(:mod:`memcore_chroma.reads`). Text
search is a case-insensitive substring match evaluated here, over the
scope's candidates: Chroma's ``where_document`` ``$contains`` is
case-sensitive.

``update`` writes through :meth:`ChromaStoreBase._replace`, a compare-and-swap: the check that the
record is still live and still the one ``update`` read, and Chroma's ``update`` (which writes only
ids that exist, so a delete that slips in between is never undone), in one step under the write
lock every write and delete takes too (the process's thread lock; the server's async API, its
asyncio lock). ``scopes()`` reads the scope keys of the
entries a prefix sees (:meth:`ChromaStoreBase._scopes`): Chroma has no grouping.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Literal, TypeVar
from uuid import UUID

import numpy as np
from chromadb.api.models.Collection import Collection
from chromadb.errors import NotFoundError

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    MemcoreError,
    StoreError,
    StoreFullError,
)
from memcore.filters import Comparison, Filter, evaluate
from memcore.kit import check_same_dimension, order_key
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord, epoch_micros
from memcore.scope import Scope
from memcore.sessions import run_session
from memcore.store import BaseStore, VectorSpace, text_matches
from memcore.validation import Matrix
from memcore_chroma import connection, erasure, reads, rebuild, recovery
from memcore_chroma.calls import CollectionCall, Session, collection_call
from memcore_chroma.connection import Connection
from memcore_chroma.encoding import (
    CREATED_AT_KEY,
    EXPIRES_AT_KEY,
    RECORD_ID_KEY,
    VECTOR_KEY,
    Where,
    all_of,
    decode_found,
    encode,
    entry_id,
    exact_entries,
    flat_metadata,
    is_live,
    live_clauses,
    owned_by,
    placeholder_vectors,
    scope_clauses,
    scope_of,
    stored_scope,
)
from memcore_chroma.errors import ExclusiveMaintenanceError, partly_written, translated
from memcore_chroma.filters import CompiledFilter, compile_filter, expresses
from memcore_chroma.opening import (
    FORMAT,
    META_DIMENSION,
    META_EMBEDDER,
    META_FORMAT,
    META_INDEX_DIMENSION,
    META_SCOPE_KEYS,
    META_STAND_INS,
    REBUILD_SUFFIX,
    Meta,
    backfill_scope_keys,
    checked_metadata,
    ef_search_of,
    holds_stand_ins,
    int_value,
    migrate,
    open_collection,
    settled,
)
from memcore_chroma.reads import Keep, chunks
from memcore_chroma.rebuild import PAGE_SIZE
from memcore_chroma.shortcuts import Hints, Misses

T = TypeVar("T")

LARGE_SELECTIONS_KEPT = 4_096
"""How many large searches' ``where`` documents a store remembers (then it forgets them all)."""

FULL_DISK_MARGIN = 64 * 2**20
"""Free bytes under which a failed embedded write is taken for a full disk (Chroma's error does not say)."""


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

    db_system_name: ClassVar[str | None] = "chromadb"
    rebuilds_safely: bool = True
    """Whether this process is the collection's only user, so that a rebuild loses no one's writes."""

    def __init__(
        self, chroma: Connection, collection: str, dimension: int | None, ef_search: int | None = None
    ) -> None:
        super().__init__()
        self._connection = chroma
        self._name = collection
        self._meta: Meta = {}
        self._large_selections: set[str] = set()
        """The ``where`` documents of searches that selected more than
        :data:`~memcore_chroma.reads.SMALL_SELECTION` entries: they go straight to Chroma's HNSW
        search (a scope that shrank since is only searched more slowly)."""
        self._window_bounds = Hints()
        """Where each window read lately began (:mod:`~memcore_chroma.shortcuts`)."""
        self._hit_depths = Hints()
        """How deep in the collection's nearest entries each large search found its hits lately."""
        self._tail_misses = Misses()
        """Windows whose newest records were not in the collection's tail lately."""
        self._unscoped_misses = Misses()
        """Filters that selected many entries of the collection lately."""
        self._unfiltered_misses = Misses()
        """Large searches whose hits were not among the collection's nearest entries lately."""
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
                        migrate(self._collection, meta[META_FORMAT])
                        meta[META_FORMAT] = FORMAT
                    if not isinstance(meta.get(META_STAND_INS), bool):
                        meta[META_STAND_INS] = holds_stand_ins(self._collection)
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

    @staticmethod
    def _selecting(scope: Scope, compiled: CompiledFilter, *extra: Where) -> Where | None:
        """The ``where`` of ``scope``, ``compiled`` and ``extra``, expired records included: what
        deletes send, and reads that decode what they read (they check :meth:`_alive` instead)."""
        clauses = scope_clauses(scope)
        if compiled.where is not None:
            clauses.append(compiled.where)
        return all_of([*clauses, *extra])

    def _live_where(self) -> list[Where]:
        """The implicit read condition, ``expires_at > now``, as ``where`` clauses, for the reads
        that decode nothing (counts, ``scopes()``); it matches nearly every entry, so Chroma scans
        the collection for it, which reads that decode records avoid by checking :meth:`_alive`."""
        return live_clauses(self._live_micros())

    def _alive(self) -> Keep:
        """The implicit read condition as a check of a decoded record, ``now`` taken once."""
        now = self._live_micros()
        return lambda record: is_live(record, now)

    def _keeping(self, node: Filter | None, *checks: Keep) -> Keep:
        """The check of a record read by id: live, matching ``node`` and every one of ``checks``."""
        alive = self._alive()
        return lambda record: alive(record) and evaluate(node, record) and all(c(record) for c in checks)

    def _run(self, session: Session[T]) -> T:
        """Run a read's session (:mod:`memcore_chroma.calls`) through the sync client."""
        return run_session(session, self._make)

    def _make(self, call: CollectionCall) -> Any:
        return self._call(call.action, lambda collection: getattr(collection, call.method)(**call.kwargs))

    def _matching_entries(
        self, scope: Scope, node: Filter | None, *, live: bool
    ) -> Session[tuple[list[str], Where | None]]:
        """The entry ids of the records in ``scope`` that match ``node`` (only the live ones if
        ``live``, else expired ones too), and a ``where`` selecting them."""
        compiled = compile_filter(node)
        if compiled.nothing:
            return [], None
        where = self._selecting(scope, compiled, *(self._live_where() if live else []))
        if compiled.exact:
            found = yield from collection_call("finding records", "get", where=where, include=[])
            return found["ids"], where
        records = yield from reads.candidates(where)
        return [entry_id(r) for r in records if compiled.admits(node, r)], where

    @staticmethod
    def _of_ids(scope: Scope, ids: list[UUID], live: list[Where]) -> Iterator[Where | None]:
        """``where`` documents selecting the records of ``ids`` in ``scope``, in every exact scope
        within it (:data:`PAGE_SIZE` ids each), that ``live`` (:meth:`_live_where`, or none) admits."""
        for chunk in chunks(ids, PAGE_SIZE):
            yield all_of([*scope_clauses(scope), {RECORD_ID_KEY: {"$in": [str(i) for i in chunk]}}, *live])

    # -- writing ---------------------------------------------------------------

    def _add(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        with self._connection.write_lock:
            meta = self._meta if settled(self._meta) else self._fresh_meta()
            updates = self._run(self._add_session(records, vectors, meta))
            if updates:  # only once the records are in: a failed add changes no metadata
                self._write_meta(updates)
            self._connection.wrote(len(records))

    def _add_session(self, records: list[MemoryRecord], vectors: Matrix | None, meta: Meta) -> Session[Meta]:
        """Upsert ``records`` (a call per :data:`PAGE_SIZE`), after reading which metadata keys
        their entries hold now (hold the write lock); the collection metadata to write once they
        are in (none once ``meta`` is :func:`settled`)."""
        entries = [entry_id(record) for record in records]
        existing = yield from collection_call(
            "reading replaced records", "get", ids=entries, include=["metadatas"]
        )
        return (yield from self._write_session("upsert", records, vectors, meta, existing))

    def _write_session(
        self,
        method: Literal["upsert", "update"],
        records: list[MemoryRecord],
        vectors: Matrix | None,
        meta: Meta,
        existing: Any,
    ) -> Session[Meta]:
        """Write ``records`` with ``method`` (a call per :data:`PAGE_SIZE`), removing the metadata
        keys their entries hold in ``existing`` (a ``get`` of them with ``metadatas``) that they
        no longer have; the collection metadata to write once they are in."""
        entries = [entry_id(record) for record in records]
        previous = {
            entry: set(meta) for entry, meta in zip(existing["ids"], existing["metadatas"] or [], strict=True)
        }
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
                    yield from collection_call(
                        "writing records",
                        method,
                        ids=entries[batch],
                        embeddings=embeddings[batch],
                        documents=documents[batch],
                        metadatas=metadatas[batch],
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
        return updates

    def _stand_ins(self, meta: Meta, count: int) -> tuple[np.ndarray, Meta]:
        """Stand-in vectors in the size the index holds (the dimension, if known, before any)."""
        flag: Meta = {} if meta.get(META_STAND_INS) is True else {META_STAND_INS: True}
        indexed = int_value(meta, META_INDEX_DIMENSION)
        if indexed is not None:
            return placeholder_vectors(count, indexed), flag
        size = int_value(meta, META_DIMENSION) or 1
        return placeholder_vectors(count, size), {**flag, META_INDEX_DIMENSION: size}

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

    def _deletion(self, ids: Sequence[str], where: Where | None) -> Session[int]:
        """Delete these entries, but only where ``where`` still holds (another writer may have moved one).

        Returns the count Chroma reports where it reports one, else how many ids were given.
        """
        deleted = 0
        for chunk in chunks(ids, PAGE_SIZE):
            with self._undone_on_failure(list(chunk)):
                result = yield from collection_call(
                    "deleting records", "delete", ids=list(chunk), where=where
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
            return self._run(self._delete_session(scope, ids))

    def _delete_session(self, scope: Scope, ids: list[UUID]) -> Session[int]:
        entries: list[str] = []
        if scope.is_exact:
            # An exact scope names its entries: found by id, deleted by id (a where would scan).
            for chunk in chunks(exact_entries(scope, ids), PAGE_SIZE):
                found = yield from collection_call("finding records", "get", ids=list(chunk), include=[])
                entries += found["ids"]
            return (yield from self._deletion(entries, None))
        for where in self._of_ids(scope, ids, []):
            entries += (yield from collection_call("finding records", "get", where=where, include=[]))["ids"]
        return (yield from self._deletion(entries, all_of(scope_clauses(scope))))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        with self._connection.write_lock:
            return self._run(self._delete_where_session(scope, node))

    def _delete_where_session(self, scope: Scope, node: Filter | None) -> Session[int]:
        entries, where = yield from self._matching_entries(scope, node, live=False)
        return (yield from self._deletion(entries, where))

    def _replace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        """Write ``new`` if the entry of ``old`` is still live and still holds ``old``: the check and
        the write in one step under the write lock, which this process's other writes and deletes
        take too (see :meth:`_replace_session`)."""
        with self._connection.write_lock:
            meta = self._meta if settled(self._meta) else self._fresh_meta()
            written, updates = self._run(self._replace_session(old, new, vector, meta))
            if updates:
                self._write_meta(updates)
            return written

    def _replace_session(
        self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None, meta: Meta
    ) -> Session[tuple[bool, Meta]]:
        """Whether the entry of ``old`` is live and still holds ``old`` (a compare-and-swap: the
        document is read and decoded, and compared with ``old``), and if so ``new`` written over it
        with Chroma's ``update`` (hold the write lock); the collection metadata to write once it is in.

        ``update`` writes only entries that exist (an id that does not is skipped, not created):
        a delete that lands between the check and the write, from a client this process's write
        lock does not serialise (another process on a server), makes the write a no-op instead of
        bringing the record back. Another client's write that lands there is overwritten: Chroma
        has no conditional write (see the README).
        """
        # By id alone: the entry's id is the record's exact scope and id.
        existing = yield from collection_call(
            "reading the record to update", "get", ids=[entry_id(old)], include=["documents", "metadatas"]
        )
        if decode_found(existing) != [old] or not self._alive()(old):
            return False, {}
        return True, (yield from self._write_session("update", [new], vector, meta, existing))

    def _scopes(self, prefix: Scope) -> list[tuple[Scope, int]]:
        return self._run(self._scopes_session(prefix))

    def _scopes_session(self, prefix: Scope) -> Session[list[tuple[Scope, int]]]:
        """The exact scopes of the live entries ``prefix`` sees, with their counts, from their scope
        keys alone.

        Chroma has no grouping: the ids the ``where`` (the prefix and the live condition) selects
        are listed (no documents, no vectors, no metadata), then their metadata is read
        (``include=["metadatas"]``, :data:`PAGE_SIZE` ids a call, with the same ``where`` again:
        an entry deleted or rewritten meanwhile is not counted, and unlike pages by offset, no
        concurrent delete shifts an entry past a page) and only the ``scope.<field>`` keys are
        looked at: Chroma returns an entry's metadata whole, it cannot pick keys. Documents and
        embeddings are never read.
        """
        where = all_of([*scope_clauses(prefix), *self._live_where()])
        listed = yield from collection_call("listing scopes", "get", where=where, include=[])
        counts: dict[tuple[str | None, ...], int] = {}
        for chunk in chunks(listed["ids"], PAGE_SIZE):
            page = yield from collection_call(
                "reading scopes", "get", ids=list(chunk), where=where, include=["metadatas"]
            )
            for metadata in page["metadatas"] or []:
                key = stored_scope(dict(metadata))
                counts[key] = counts.get(key, 0) + 1
        return [(scope_of(key), count) for key, count in counts.items()]

    # -- reading ---------------------------------------------------------------

    def _get(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        return self._run(self._get_session(scope, ids))

    def _get_session(self, scope: Scope, ids: list[UUID]) -> Session[list[MemoryRecord]]:
        alive = self._alive()
        found: list[MemoryRecord] = []
        if scope.is_exact:
            for chunk in chunks(exact_entries(scope, ids), PAGE_SIZE):
                found += yield from reads.by_ids(chunk)
        else:
            for where in self._of_ids(scope, ids, []):
                found += yield from reads.candidates(where)
        return [record for record in found if alive(record)]

    def _vectors(self, scope: Scope, ids: list[UUID]) -> list[tuple[UUID, Matrix]]:
        return self._run(self._vectors_session(scope, ids))

    def _vectors_session(self, scope: Scope, ids: list[UUID]) -> Session[list[tuple[UUID, Matrix]]]:
        now = self._live_micros()
        selections: Iterator[dict[str, Any]] = (
            ({"ids": list(chunk)} for chunk in chunks(exact_entries(scope, ids), PAGE_SIZE))
            if scope.is_exact
            else ({"where": where} for where in self._of_ids(scope, ids, []))
        )
        found: list[tuple[UUID, Matrix]] = []
        for selection in selections:
            page = yield from reads.asked_again_if_an_entry_vanished(
                "reading vectors", "get", include=["embeddings", "metadatas"], **selection
            )
            embeddings = page["embeddings"] if page["embeddings"] is not None else []
            found += [
                (UUID(str(meta[RECORD_ID_KEY])), np.asarray(vector, dtype=np.float32))
                for vector, meta in zip(embeddings, page["metadatas"] or [], strict=True)
                # records without a vector hold a stand-in; the expiry as the live clause reads it
                if meta.get(VECTOR_KEY) is True and (now is None or int(meta.get(EXPIRES_AT_KEY, 0)) > now)
            ]
        return found

    def _count(self, scope: Scope, node: Filter | None) -> int:
        return self._run(self._count_session(scope, node))

    def _count_session(self, scope: Scope, node: Filter | None) -> Session[int]:
        entries, _ = yield from self._matching_entries(scope, node, live=True)
        return len(entries)

    def _expresses(self, comparison: Comparison) -> bool:
        return expresses(comparison)

    def _list(self, scope: Scope, query: ListQuery) -> list[MemoryRecord]:
        return self._run(self._list_session(scope, query))

    def _list_session(self, scope: Scope, query: ListQuery) -> Session[list[MemoryRecord]]:
        compiled = compile_filter(query.filter)
        if compiled.nothing:
            return []
        bounds: list[Where] = []
        after = None if query.after is None else epoch_micros(query.after)
        before = None if query.before is None else epoch_micros(query.before)
        if after is not None:
            bounds.append({CREATED_AT_KEY: {"$gt": after}})
        if before is not None:
            bounds.append({CREATED_AT_KEY: {"$lt": before}})

        def in_time(record: MemoryRecord) -> bool:
            created = epoch_micros(record.created_at)
            return (after is None or created > after) and (before is None or created < before)

        where = self._selecting(scope, compiled, *bounds)
        keep = self._keeping(query.filter, in_time)
        descending = query.order == "desc"
        if where is not None and where == all_of(scope_clauses(scope)):
            if descending and query.limit is not None and query.limit <= reads.SHORTCUT_WINDOW:
                window = yield from self._newest_window(scope, where, keep, query.limit)
                if window is not None:
                    return window
        elif compiled.where is not None:
            across: Where = {"$and": [compiled.where, *bounds]} if bounds else compiled.where
            selection = json.dumps(across, sort_keys=True)
            if self._unscoped_misses.worth_trying(selection):
                found = yield from reads.selected_across_scopes(across, owned_by(scope), keep)
                if found is not None:
                    found.sort(key=order_key, reverse=descending)
                    return found[: query.limit]
                self._unscoped_misses.missed(selection)
        return (yield from reads.ordered(where, keep, compiled.exact, descending, query.limit))

    def _newest_window(
        self, scope: Scope, where: Where, keep: Keep, limit: int
    ) -> Session[list[MemoryRecord] | None]:
        """The ``limit`` newest records of ``scope`` (selected by ``where``) that ``keep`` keeps,
        newest first, read without a ``where`` over the scope if a shortcut answers
        (:mod:`~memcore_chroma.shortcuts`); ``None`` if none does."""
        selection = json.dumps(where, sort_keys=True)
        owns = owned_by(scope)
        window = None
        bound = self._window_bounds.get(selection)
        if bound is not None:
            window = yield from reads.newest_since(bound, owns, keep, limit)
        if window is None and self._tail_misses.worth_trying(selection):
            window = yield from reads.newest_from_tail(owns, keep, limit)
            if window is None:
                self._tail_misses.missed(selection)
        if window is None:
            self._window_bounds.remember(selection, None)
            return None
        window = sorted(window, key=order_key, reverse=True)[:limit]
        oldest = epoch_micros(window[-1].created_at) if len(window) == limit else None
        self._window_bounds.remember(selection, oldest)
        return window

    def _search(self, scope: Scope, request: SearchQuery) -> list[ScoredRecord]:
        if request.vector is not None and not self._indexes_vectors_of(request.vector.shape[1]):
            return []
        # Read through a handle fetched anew if the client restarted: another store of this
        # process may have changed the setting a moment ago (it restarts the client to apply it).
        ef_search = self._call("reading the collection's ef_search", ef_search_of)
        return self._run(self._search_session(scope, request, ef_search))

    def _search_session(
        self, scope: Scope, request: SearchQuery, ef_search: int | None
    ) -> Session[list[ScoredRecord]]:
        """The search, once :meth:`_indexes_vectors_of` said the index may hold the query's vectors.

        :param ef_search: the collection's setting (``None``: Chroma's default), which sets how
            many nearest entries a search without a ``where`` asks for.
        """
        query, text, node, limit = request.vector, request.text, request.filter, request.limit
        compiled = compile_filter(node)
        if compiled.nothing:
            return []

        alive = self._alive()

        def wanted(record: MemoryRecord) -> bool:
            return (
                alive(record)
                and compiled.admits(node, record)
                and (text is None or text_matches(text, record.message.content))
            )

        if query is None:
            found = yield from reads.candidates(self._selecting(scope, compiled))
            records = [r for r in found if wanted(r)]
            records.sort(key=order_key, reverse=True)
            return [ScoredRecord.of(r, 1.0) for r in records[:limit]]
        # Stand-ins are also skipped hit by hit; the clause only spares ranking them.
        stand_ins = [{VECTOR_KEY: True}] if self._meta.get(META_STAND_INS) is not False else []
        where = self._selecting(scope, compiled, *stand_ins)
        selection = json.dumps(where, sort_keys=True)
        if selection not in self._large_selections:
            hits = yield from reads.small_selection_search(
                where, query, lambda record: wanted(record) and evaluate(node, record), limit
            )
            if hits is not None:
                return hits
            if len(self._large_selections) >= LARGE_SELECTIONS_KEPT:
                self._large_selections.clear()
            self._large_selections.add(selection)
        if self._unfiltered_misses.worth_trying(selection):
            unfiltered = yield from reads.unfiltered_search(
                query,
                owned_by(scope),
                lambda record: scope.matches(record.scope) and wanted(record) and evaluate(node, record),
                limit,
                ef_search,
                self._hit_depths.get(selection) or 0,
            )
            if unfiltered is not None:
                self._hit_depths.remember(selection, unfiltered.depth)
                return unfiltered.hits
            self._unfiltered_misses.missed(selection)
        return (yield from reads.vector_search(where, query, wanted, limit, compiled.exact and text is None))

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

    # -- rebuilding, erasure and closing ---------------------------------------

    def _rebuild(self, meta: Meta, placeholder_dimension: int | None = None) -> None:
        """Copy every live entry into a fresh collection and swap it in (hold the write lock).

        The copy (:func:`~memcore_chroma.rebuild.copy_live_entries`) is made while other threads
        keep reading; the swap (drop the old collection, rename the copy) holds exclusive access,
        and then every store on this client fetches its handle anew.
        """
        chroma = self._connection
        with chroma.reading():
            client = chroma.client
            copy = rebuild.copy_live_entries(
                client, self._handle(), self._name + REBUILD_SUFFIX, meta, placeholder_dimension
            )
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

    def _purge(self) -> None:
        """Physically erase deleted records (expired ones are deleted by then: ``purge()`` sweeps
        first): rebuild the collection without them.

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
                    self._connection.restart(lambda: rebuild.compact_and_reindex(path))
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
