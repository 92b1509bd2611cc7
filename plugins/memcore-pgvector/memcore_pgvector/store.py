"""``postgresql://``: memcore records in a PostgreSQL table, searched by pgvector.

Every read and delete puts the scope in its ``WHERE`` clause, on the indexed
scope columns (:func:`~memcore_pgvector.filters.scope_condition`); a delete by
id is ``id = ANY(ids) AND scope``. Every read also has the live condition there,
``expires_at > now`` with the store's clock's now as a bound parameter
(:meth:`PgvectorStore._visible`), so an expired record is never returned; deletes
reach expired records too. An update is one conditional ``UPDATE ... WHERE key AND
expires_at > now``, so a concurrent delete is never undone, and ``scopes()`` is one
``GROUP BY`` of the scope columns. Filters compile to SQL with bound parameters
(:mod:`memcore_pgvector.filters`). Vector search orders by pgvector's cosine
distance over an HNSW index, with ``hnsw.iterative_scan`` so that a scoped or
filtered query still returns ``limit`` hits when the scope is a small part of
the table. A row's primary key is its record's scope and id
(:func:`~memcore.scope.storage_id`), so the same id in two scopes is two rows and a
write is an upsert of its own scope's row only (``INSERT ... ON CONFLICT (key)``),
one transaction per batch. Each hook's statements are written once, as a session
(:mod:`memcore_pgvector.sessions`) that runs on a blocking connection for the sync API and on
psycopg's ``AsyncConnectionPool`` for the async API (:mod:`memcore_pgvector.connections`). A store
object inherited by a forked process opens pools of its own there on its first call.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Self, TypeVar
from urllib.parse import urlencode, urlunsplit
from uuid import UUID

import numpy as np
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidInputError,
    InvalidRecordError,
    ScopeError,
    StoreCorruptedError,
)
from memcore.filters import COLUMN_FIELDS, Comparison, Filter, column_values
from memcore.kit import check_same_dimension, clamp_score
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord, epoch_micros
from memcore.scope import SCOPE_FIELDS, Scope, storage_id
from memcore.sessions import OFFLOAD_AT
from memcore.store import BaseStore, Capabilities, VectorSpace, text_matches
from memcore.urls import COLLECTION, StoreURL
from memcore.validation import Matrix
from memcore_pgvector.connections import CONNECT_SECONDS, POOL_SIZE, Connections
from memcore_pgvector.errors import translated
from memcore_pgvector.filters import Condition, compile_filter, expresses, scope_condition
from memcore_pgvector.schema import DEFAULT_TABLE, NUL_MARK, Tables, fold_content
from memcore_pgvector.sessions import Session, Statement, arun_statements, run_statements

R = TypeVar("R")

logger = logging.getLogger(__name__)

_RECORD_COLUMNS = [
    *(spec.name for spec in COLUMN_FIELDS),
    *("content_folded", "metadata", "record", "embedding"),
]
"""The columns an upsert rewrites: the filter table's record fields, then the stored forms."""
_INSERTED = ["key", "id", *SCOPE_FIELDS, *_RECORD_COLUMNS]
_FIRST_RECORD_COLUMN = len(_INSERTED) - len(_RECORD_COLUMNS)
# Column names come from memcore's fixed tables, never from the caller.
_UPSERT = (
    f"INSERT INTO {{}} ({', '.join(_INSERTED)}) VALUES ({', '.join(['%s'] * len(_INSERTED))})"
    f" ON CONFLICT (key) DO UPDATE SET {', '.join(f'{c} = EXCLUDED.{c}' for c in _RECORD_COLUMNS)}"
)
_REPLACE = f"UPDATE {{}} SET {', '.join(f'{c} = %s' for c in _RECORD_COLUMNS)} WHERE "
_SCOPE_COUNTS = f"SELECT {', '.join(SCOPE_FIELDS)}, count(*) FROM {{}} WHERE {{}} GROUP BY 1, 2, 3, 4"
_DIMENSION = "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'embedding'"
_LOCK_RECORD = "SELECT record FROM {} WHERE "
_NEWEST_FIRST = " ORDER BY created_at DESC, id DESC, key DESC LIMIT %s"

PURGE_WAIT_SECONDS = 30.0
"""How long a purge waits for older transactions to end before each rewrite, then rewrites anyway."""


def _keys_of(records: Sequence[MemoryRecord]) -> Condition:
    """A condition selecting exactly these records' rows (by key: another scope may use their ids)."""
    return "key = ANY(%s)", [[storage_id(record.scope, record.id) for record in records]]


def _where(*conditions: Condition) -> Condition:
    return " AND ".join(f"({text})" for text, _ in conditions), [
        v for _, values in conditions for v in values
    ]


def _record(data: str) -> MemoryRecord:
    try:
        return MemoryRecord.from_stored_json(data)
    except InvalidInputError as exc:
        raise StoreCorruptedError(f"a row holds an invalid memcore record: {exc}") from None


class PgvectorStore(BaseStore):
    """memcore records in PostgreSQL with pgvector; safe to share between threads.

    Several processes may open stores on one table at once. A store object inherited through
    ``fork()`` (gunicorn ``--preload``, celery prefork) opens a pool of its own in the child on
    its first call there, leaving the parent's connections to the parent. The async API runs its
    statements on psycopg's ``AsyncConnectionPool`` (:mod:`memcore_pgvector.connections`).

    :param conninfo: a libpq connection string or URI (``postgresql://user@host:port/db``).
    :param table: the records table (created if missing), ``memcore_records`` by default.
    """

    name: ClassVar[str] = "pgvector"
    db_system_name: ClassVar[str | None] = "postgresql"
    schemes: ClassVar[tuple[str, ...]] = ("postgresql", "postgres")
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, ann=True, server=True, expiry=True)

    def __init__(self, conninfo: str, table: str = DEFAULT_TABLE) -> None:
        super().__init__()
        self._tables = Tables(table)
        self._conninfo = conninfo
        self.location = redacted(conninfo)
        with translated("open the store", self.location):
            with psycopg.connect(conninfo, connect_timeout=CONNECT_SECONDS) as connection:
                self._tables.migrate(connection, self.location)
            self._connections = Connections(conninfo, self.location, self._closed_error)
            try:
                self._dimension = self._read_dimension()
            except BaseException:
                self._connections.close()
                raise

    def _worker_count(self) -> int:
        return POOL_SIZE  # one blocking call per pooled connection

    def _native_on_this_loop(self) -> bool:
        return self._connections.serves()

    def _reconnect_in_child(self) -> None:
        """In a forked child: pools of its own, the inherited ones dropped without being closed
        (:meth:`memcore_pgvector.connections.Connections.reconnect_in_child`)."""
        self._connections.reconnect_in_child()

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Open ``postgresql://user@host:port/db`` (``?collection=name`` picks the table; other query
        parameters go to libpq, for example ``?host=/run/postgresql`` for a Unix socket)."""
        return cls.open_url(StoreURL.parse(url, params=(COLLECTION,), other_params=True))

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open the store of a parsed ``postgresql://`` URL (see :meth:`from_url`)."""
        return cls(*connection_target(url))

    @property
    def dimension(self) -> int | None:
        if self._dimension is None:  # another process may have written the first vector since
            self._dimension = self._read_dimension()
        return self._dimension

    # -- running sessions (memcore_pgvector.sessions): blocking, or on the event loop ----------

    def _run(self, action: str, session: Session[R], *, transaction: bool = False) -> R:
        with self._connections.connection(action) as connection:
            if transaction:
                with connection.transaction():
                    return run_statements(connection, session)
            return run_statements(connection, session)

    async def _arun_session(
        self, action: str, session: Session[R], *, transaction: bool = False, heavy_start: bool = False
    ) -> R:
        offload = self._worker_pool().run
        async with self._connections.aconnection(action) as connection:
            if transaction:
                async with connection.transaction():
                    return await arun_statements(connection, session, offload, heavy_start=heavy_start)
            return await arun_statements(connection, session, offload, heavy_start=heavy_start)

    # -- the hooks: each a session, run by a sync hook and its async variant -------------------

    def _read_dimension(self) -> int | None:
        return self._run("read the vector dimension", self._dimension_session())

    def _dimension_session(self) -> Session[int | None]:
        """The ``n`` of the embedding column's ``vector(n)`` type (``None`` while it is untyped)."""
        rows = yield Statement(_DIMENSION, [self._tables.name])  # its own quoted form: [a-z0-9_]
        if not rows:
            raise StoreCorruptedError(f"the table {self._tables.name} has no embedding column")
        typmod = rows[0][0]
        return None if typmod is None or typmod < 1 else int(typmod)

    def _add(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None:
        self._run("add records", self._add_session(records, vectors), transaction=True)
        if vectors is not None:
            self._dimension = vectors.shape[1]  # committed: the column is vector(n) for everyone now

    async def _aadd(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None:
        session = self._add_session(records, vectors)
        heavy = len(records) >= OFFLOAD_AT  # building the rows: tens of microseconds a record
        await self._arun_session("add records", session, transaction=True, heavy_start=heavy)
        if vectors is not None:
            self._dimension = vectors.shape[1]

    def _add_session(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> Session[None]:
        """One transaction: the column typed by the first vectors, then the upsert."""
        rows = _rows(records, vectors)
        if vectors is not None and self._dimension != vectors.shape[1]:
            yield from self._fix_dimension(vectors.shape[1])
        yield Statement(sql.SQL(_UPSERT).format(self._tables.records), rows, result="none", many=True)

    def _fix_dimension(self, dimension: int) -> Session[None]:
        """Type the column ``vector(dimension)`` unless it has a type; refuse another dimension."""
        lock = sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(self._tables.records)
        yield Statement(lock, result="none")
        current = yield from self._dimension_session()  # another process may have fixed it first
        if current is None:
            for statement in self._tables.fix_dimension(dimension):
                yield Statement(statement, result="none")
            current = dimension
        check_same_dimension(current, dimension)

    def _select(
        self, where: Condition, tail: str = "", tail_values: Sequence[Any] = ()
    ) -> Session[builtins.list[MemoryRecord]]:
        text, values = where
        query = sql.SQL("SELECT record FROM {} WHERE " + text + tail).format(self._tables.records)
        rows = yield Statement(query, [*values, *tail_values])
        return [_record(row[0]) for row in rows]

    def _expresses(self, comparison: Comparison) -> bool:
        return expresses(comparison)

    def _visible(self, scope: Scope, node: Filter | None = None) -> Condition:
        """What every read's ``WHERE`` starts with: the scope, ``node``, and the live condition
        (``expires_at > now``, the store's :attr:`clock` read now and bound as a parameter)."""
        return _where(scope_condition(scope), compile_filter(self._live(node)))

    def _visible_ids(self, scope: Scope, ids: builtins.list[UUID]) -> Condition:
        return _where(self._visible(scope), ("id = ANY(%s)", [ids]))

    def _get(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]:
        return self._run("get records", self._select(self._visible_ids(scope, ids)))

    async def _aget(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]:
        return await self._arun_session("get records", self._select(self._visible_ids(scope, ids)))

    def _vectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        return self._run("read vectors", self._vectors_session(scope, ids))

    async def _avectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        return await self._arun_session("read vectors", self._vectors_session(scope, ids))

    def _vectors_session(
        self, scope: Scope, ids: builtins.list[UUID]
    ) -> Session[builtins.list[tuple[UUID, Matrix]]]:
        text, values = _where(self._visible_ids(scope, ids), ("embedding IS NOT NULL", []))
        rows = yield Statement(
            sql.SQL("SELECT id, embedding FROM {} WHERE " + text).format(self._tables.records), values
        )
        return [(row[0], row[1].to_numpy().astype(np.float32)) for row in rows]

    def _list(self, scope: Scope, query: ListQuery) -> builtins.list[MemoryRecord]:
        return self._run("list records", self._list_session(scope, query))

    async def _alist(self, scope: Scope, query: ListQuery) -> builtins.list[MemoryRecord]:
        return await self._arun_session("list records", self._list_session(scope, query))

    def _list_session(self, scope: Scope, query: ListQuery) -> Session[builtins.list[MemoryRecord]]:
        conditions = [self._visible(scope, query.filter)]
        if query.before is not None:
            conditions.append(("created_at < %s", [epoch_micros(query.before)]))
        if query.after is not None:
            conditions.append(("created_at > %s", [epoch_micros(query.after)]))
        direction = "DESC" if query.order == "desc" else "ASC"
        tail = f" ORDER BY created_at {direction}, id {direction}, key {direction}"
        if query.limit is None:
            return (yield from self._select(_where(*conditions), tail))
        return (yield from self._select(_where(*conditions), tail + " LIMIT %s", [query.limit]))

    def _search(self, scope: Scope, request: SearchQuery) -> builtins.list[ScoredRecord]:
        return self._run("search", self._search_session(scope, request))

    async def _asearch(self, scope: Scope, request: SearchQuery) -> builtins.list[ScoredRecord]:
        return await self._arun_session("search", self._search_session(scope, request))

    def _search_session(self, scope: Scope, request: SearchQuery) -> Session[builtins.list[ScoredRecord]]:
        query, text, limit = request.vector, request.text, request.limit
        conditions = [self._visible(scope, request.filter)]
        if text is not None:
            conditions.append((yield from self._text_condition(text, conditions)))
        if query is None:
            records = yield from self._select(_where(*conditions), _NEWEST_FIRST, [limit])
            return [ScoredRecord.of(record, 1.0) for record in records]
        if self._dimension is None:  # another process may have written the first vector since
            self._dimension = yield from self._dimension_session()
        if self._dimension is None:  # an embedder is bound but no vector was written yet
            return []
        where_text, values = _where(*conditions, ("embedding IS NOT NULL", []))
        statement = sql.SQL(
            "SELECT record, embedding <=> %s AS distance FROM {} WHERE "
            + where_text
            + " ORDER BY embedding <=> %s LIMIT %s"
        ).format(self._tables.records)
        vector = query[0]
        rows = yield Statement(statement, [vector, *values, vector, limit])
        # relaxed_order may return a few hits slightly out of order: settle it here.
        rows.sort(key=lambda row: row[1])
        return [ScoredRecord.of(_record(data), clamp_score(1.0 - distance)) for data, distance in rows]

    def _text_condition(self, text: str, conditions: builtins.list[Condition]) -> Session[Condition]:
        """``text`` in the content, case-insensitively, exactly as :func:`memcore.store.text_matches`.

        The folded copy holds a NUL of the content as :data:`~memcore_pgvector.schema.NUL_MARK`
        (PostgreSQL text cannot hold NUL). A text without NUL and without that mark matches the
        copy exactly where it matches the content; one with either (rare) is checked here, on the
        records whose copy contains it (a superset), against their exact content.
        """
        folded = text.casefold()
        condition = ("strpos(content_folded, %s) > 0", [fold_content(text)])
        if "\x00" not in folded and NUL_MARK not in folded:
            return condition
        candidates = yield from self._select(_where(*conditions, condition))
        return _keys_of([r for r in candidates if text_matches(text, r.message.content)])

    def _count(self, scope: Scope, node: Filter | None) -> int:
        return self._run("count records", self._count_session(scope, node))

    async def _acount(self, scope: Scope, node: Filter | None) -> int:
        return await self._arun_session("count records", self._count_session(scope, node))

    def _count_session(self, scope: Scope, node: Filter | None) -> Session[int]:
        text, values = self._visible(scope, node)
        rows = yield Statement(
            sql.SQL("SELECT count(*) FROM {} WHERE " + text).format(self._tables.records), values
        )
        return int(rows[0][0]) if rows else 0

    def _delete(self, scope: Scope, ids: builtins.list[UUID]) -> int:
        return self._run("delete records", self._deletion(_by_ids(scope, ids)))

    async def _adelete(self, scope: Scope, ids: builtins.list[UUID]) -> int:
        return await self._arun_session("delete records", self._deletion(_by_ids(scope, ids)))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        return self._run(
            "delete records", self._deletion(_where(scope_condition(scope), compile_filter(node)))
        )

    async def _adelete_where(self, scope: Scope, node: Filter | None) -> int:
        where = _where(scope_condition(scope), compile_filter(node))
        return await self._arun_session("delete records", self._deletion(where))

    def _deletion(self, where: Condition) -> Session[int]:
        text, values = where
        statement = sql.SQL("DELETE FROM {} WHERE " + text).format(self._tables.records)
        deleted: int = yield Statement(statement, values, result="rowcount")
        return deleted

    def _replace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        written = self._run("update a record", self._replace_session(old, new, vector), transaction=True)
        if vector is not None:
            self._dimension = vector.shape[1]
        return written

    async def _areplace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        session = self._replace_session(old, new, vector)
        written = await self._arun_session("update a record", session, transaction=True)
        if vector is not None:
            self._dimension = vector.shape[1]
        return written

    def _replace_session(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> Session[bool]:
        """In one transaction: lock the record's row (by key: its scope and id) if it is still live
        and still holds ``old``, then one ``UPDATE`` setting every column of ``new``. A delete
        committed first leaves nothing to lock, one that waits for the row lock deletes the
        updated row, and an update that committed first changed the record, so this one reads it
        again. No row is ever inserted, so an update cannot bring a deleted record back."""
        [row] = _rows([new], vector)
        text, values = _where(("key = %s", [storage_id(old.scope, old.id)]), compile_filter(self._live(None)))
        lock = sql.SQL(_LOCK_RECORD + text + " FOR UPDATE").format(self._tables.records)
        locked = yield Statement(lock, values)
        if not locked or _record(locked[0][0]) != old:
            return False
        if vector is not None and self._dimension != vector.shape[1]:
            yield from self._fix_dimension(vector.shape[1])
        statement = sql.SQL(_REPLACE + text).format(self._tables.records)
        changed = yield Statement(statement, [*row[_FIRST_RECORD_COLUMN:], *values], result="rowcount")
        return bool(changed == 1)

    def _scopes(self, prefix: Scope) -> builtins.list[tuple[Scope, int]]:
        return self._run("list scopes", self._scopes_session(prefix))

    async def _ascopes(self, prefix: Scope) -> builtins.list[tuple[Scope, int]]:
        return await self._arun_session("list scopes", self._scopes_session(prefix))

    def _scopes_session(self, prefix: Scope) -> Session[builtins.list[tuple[Scope, int]]]:
        """One ``GROUP BY`` of the scope columns over the live rows ``prefix`` sees (through the
        scope index): each exact scope as stored, and its count."""
        text, values = self._visible(prefix)
        statement = sql.SQL(_SCOPE_COUNTS).format(self._tables.records, sql.SQL(text))
        rows = yield Statement(statement, values)
        return [(_stored_scope(row[:4]), int(row[4])) for row in rows]

    def _purge(self) -> None:
        """Rewrite the tables without their deleted rows, and the planner statistics without their values.

        ``VACUUM FULL`` rewrites both tables (and rebuilds the indexes). The table's statistics
        (``pg_statistic``, which ``ANALYZE`` and autovacuum fill with sampled values: user ids,
        role, kind) are then cleared (PostgreSQL 18's ``pg_clear_attribute_stats``) and made again
        from the rows that remain (``ANALYZE``), and ``VACUUM FULL pg_statistic`` rewrites the
        catalog's file without the old versions. That last step needs a superuser or the
        ``MAINTAIN`` privilege on ``pg_statistic`` (``pg_maintain``); without it the old versions
        stay in the catalog's file until autovacuum and later writes reuse their space, and purge
        logs a warning. It locks the table (and, briefly, the statistics) for the time it takes.
        ``VACUUM FULL`` keeps every row version that some open transaction can still see, so each
        rewrite first waits (up to :data:`PURGE_WAIT_SECONDS`) for the transactions that began
        before it (:func:`_wait_for_older_snapshots`).
        PostgreSQL's write-ahead log and backups keep what they kept; their retention is the server's.
        Expired records were deleted just before (:meth:`~memcore.store.BaseStore.sweep`).
        """
        refused: builtins.list[str] = []

        def notice(diagnostic: psycopg.errors.Diagnostic) -> None:
            if diagnostic.sqlstate == "42501":  # VACUUM skips a table it may not vacuum, with a warning
                refused.append(diagnostic.message_primary or "permission denied")

        with (
            translated("purge", self.location),
            psycopg.connect(self._conninfo, autocommit=True, connect_timeout=CONNECT_SECONDS) as connection,
        ):
            waited_out = _wait_for_older_snapshots(connection)
            for table in (self._tables.records, self._tables.meta):
                connection.execute(sql.SQL("VACUUM FULL {}").format(table))
            self._clear_statistics(connection)
            connection.execute(sql.SQL("ANALYZE {}").format(self._tables.records))
            waited_out = _wait_for_older_snapshots(connection) and waited_out
            connection.add_notice_handler(notice)
            connection.execute("VACUUM FULL pg_catalog.pg_statistic")
        if not waited_out:
            logger.warning(
                "purge at %s rewrote the tables while transactions older than it were still open "
                "after %s s: rows they could see may stay in the files until the next purge",
                self.location,
                PURGE_WAIT_SECONDS,
            )
        if refused:
            logger.warning(
                "purge could not rewrite pg_statistic at %s (%s): old statistics of deleted records "
                "stay in the catalog's file until their space is reused; run VACUUM FULL pg_statistic "
                "as a superuser",
                self.location,
                refused[0],
            )

    def _clear_statistics(self, connection: psycopg.Connection[Any]) -> None:
        """Delete the records table's rows of ``pg_statistic`` (PostgreSQL 18 or newer; owner only).

        ``ANALYZE`` replaces them, but keeps them when the table is empty (nothing to sample)."""
        row = connection.execute("SELECT to_regproc('pg_catalog.pg_clear_attribute_stats')").fetchone()
        if row is None or row[0] is None:
            return
        connection.execute(
            "SELECT pg_catalog.pg_clear_attribute_stats(n.nspname, c.relname, a.attname, false)"
            " FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
            [self._tables.name],
        )

    def _load_vector_space(self) -> VectorSpace | None:
        query = sql.SQL("SELECT value FROM {} WHERE key = 'vector_space'").format(self._tables.meta)
        with self._connections.connection("read the vector space") as connection:
            row = connection.execute(query).fetchone()
        if row is None:
            return None
        value = row[0]
        embedder = value.get("embedder") if isinstance(value, dict) else None
        dimension = value.get("dimension") if isinstance(value, dict) else None
        if not isinstance(embedder, str) or not isinstance(dimension, int) or dimension < 1:
            raise StoreCorruptedError(f"the table {self._tables.name}_meta holds an invalid vector space")
        return VectorSpace(embedder, dimension)

    def _save_vector_space(self, space: VectorSpace) -> None:
        if self.dimension not in (None, space.dimension):
            raise DimensionMismatchError(
                f"the store holds {self._dimension}-dimensional vectors, not {space.dimension}"
            )
        statement = sql.SQL(
            "INSERT INTO {} (key, value) VALUES ('vector_space', %s) ON CONFLICT (key) DO NOTHING"
        ).format(self._tables.meta)
        value = {"embedder": space.embedder, "dimension": space.dimension}
        with self._connections.connection("save the vector space") as connection:
            connection.execute(statement, [Jsonb(value)])
        bound = self._load_vector_space()  # another process may have bound it first
        if bound != space:
            raise EmbedderMismatchError(
                f"the table {self._tables.name} is bound to {bound!r}, not to the embedder "
                f"{space.embedder!r}; use a table of its own for another embedder"
            )

    def _close(self) -> None:
        self._connections.close()


def _by_ids(scope: Scope, ids: builtins.list[UUID]) -> Condition:
    """The rows of ``ids`` in ``scope``, live or not (deletes reach expired records too)."""
    return _where(scope_condition(scope), ("id = ANY(%s)", [ids]))


def _stored_scope(fields: Sequence[str | None]) -> Scope:
    """A row's scope columns as the scope its records hold (stored values: not validated again)."""
    values: dict[str, Any] = {
        name: value for name, value in zip(SCOPE_FIELDS, fields, strict=True) if value is not None
    }
    return Scope.model_construct(**values)


def _rows(records: builtins.list[MemoryRecord], vectors: Matrix | None) -> builtins.list[tuple[Any, ...]]:
    """The upsert's parameter rows (:data:`_INSERTED`), each record checked for what PostgreSQL refuses."""
    for record in records:
        _check_no_nul(record)
        if record.scope.tenant is None:  # core refuses these first; the column is NOT NULL
            raise ScopeError(f"record {record.id} names no tenant; every PostgreSQL record has one")
    return [
        (
            storage_id(record.scope, record.id),
            record.id,
            record.scope.tenant,
            record.scope.user_id,
            record.scope.agent_id,
            record.scope.session_id,
            *column_values(record).values(),
            fold_content(record.message.content),
            Jsonb(record.metadata),
            record.model_dump_json(),
            None if vectors is None else vectors[row],
        )
        for row, record in enumerate(records)
    ]


def _check_no_nul(record: MemoryRecord) -> None:
    """PostgreSQL's ``jsonb`` cannot hold a NUL character: refuse metadata holding one, up front.

    (The record's JSON escapes NUL, and the copy of the content for text search marks it.)
    """
    for key, value in record.metadata.items():
        if any(
            "\x00" in item
            for item in (value if isinstance(value, list) else [value])
            if isinstance(item, str)
        ):
            raise InvalidRecordError(
                f"metadata {key!r} of record {record.id} holds a NUL character, which PostgreSQL cannot store"
            )


def connection_target(url: str | StoreURL) -> tuple[str, str]:
    """The libpq URI and the table name a ``postgresql://...[?collection=name]`` URL gives.

    :raises InvalidInputError: for another scheme, or the old ``?table=`` (say ``?collection=``).
    """
    if isinstance(url, str):
        url = StoreURL.parse(url, params=(COLLECTION,), other_params=True)
    if url.scheme not in PgvectorStore.schemes:
        raise InvalidInputError(f"expected postgresql://user@host:port/db, got a {url.scheme}:// URL")
    if "table" in url.params:
        raise InvalidInputError(
            "name the table with ?collection=name (as every memcore store does), not ?table="
        )
    table = url.text_param(COLLECTION, DEFAULT_TABLE)
    libpq = [(key, value) for key, value in url.params.items() if key != COLLECTION]
    return urlunsplit(("postgresql", url.netloc, url.path, urlencode(libpq), "")), table


def redacted(conninfo: str) -> str:
    """The connection string without its password (in the URI's user part or a ``password=``
    parameter), for messages."""
    try:
        parameters = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable connection string)"
    if "password" not in parameters:
        return conninfo
    parameters["password"] = "***"
    return make_conninfo("", **{key: value for key, value in parameters.items() if value is not None})


def _wait_for_older_snapshots(connection: psycopg.Connection[Any]) -> bool:
    """Wait until no other session holds a snapshot taken before this call; whether none did
    within :data:`PURGE_WAIT_SECONDS`.

    A transaction that began before a delete still sees the deleted rows, and ``VACUUM FULL``
    copies into the rewritten files every row version some snapshot can see: the deleted
    records would stay on disk. Sessions whose ``backend_xmin`` this role may not read (other
    roles', without ``pg_read_all_stats``) are not waited for.
    """
    row = connection.execute("SELECT (pg_catalog.txid_current() % 4294967296)::text").fetchone()
    assert row is not None
    deadline = time.monotonic() + PURGE_WAIT_SECONDS
    while True:
        older = connection.execute(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid <> pg_catalog.pg_backend_pid()"
            " AND backend_xmin IS NOT NULL AND age(backend_xmin) >= age(%s::xid)",
            [row[0]],
        ).fetchone()
        if older is None or older[0] == 0:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
