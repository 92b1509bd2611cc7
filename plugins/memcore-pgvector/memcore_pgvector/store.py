"""``postgresql://``: memcore records in a PostgreSQL table, searched by pgvector.

Every read and delete puts the scope in its ``WHERE`` clause, on the indexed
scope columns (:func:`~memcore_pgvector.filters.scope_condition`); a delete by
id is ``id = ANY(ids) AND scope``. Filters compile to SQL with bound parameters
(:mod:`memcore_pgvector.filters`). Vector search orders by pgvector's cosine
distance over an HNSW index, with ``hnsw.iterative_scan`` so that a scoped or
filtered query still returns ``limit`` hits when the scope is a small part of
the table. A row's primary key is its record's scope and id
(:func:`~memcore.scope.storage_id`), so the same id in two scopes is two rows and a
write is an upsert of its own scope's row only (``INSERT ... ON CONFLICT (key)``),
one transaction per batch. A store object inherited by a forked process opens a pool of
its own there on its first call (:meth:`PgvectorStore._reconnect_in_child`).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Self
from urllib.parse import urlencode, urlunsplit
from uuid import UUID

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidInputError,
    InvalidRecordError,
    ScopeError,
    StoreCorruptedError,
    StoreError,
)
from memcore.filters import COLUMN_FIELDS, Comparison, Filter, column_values
from memcore.kit import check_same_dimension, clamp_score
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord, epoch_micros
from memcore.scope import SCOPE_FIELDS, Scope, storage_id
from memcore.store import BaseStore, Capabilities, VectorSpace, text_matches
from memcore.urls import COLLECTION, StoreURL
from memcore.validation import Matrix
from memcore_pgvector.errors import translated
from memcore_pgvector.filters import Condition, compile_filter, expresses, scope_condition
from memcore_pgvector.schema import DEFAULT_TABLE, NUL_MARK, Tables, fold_content

logger = logging.getLogger(__name__)

POOL_SIZE = 8
"""Connections one store keeps at most (threads beyond it wait for one)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to wait for the server when the store opens."""
CONNECT_SECONDS = int(CONNECT_TIMEOUT)
WAIT_TIMEOUT = 5.0
"""Seconds a call waits for a connection (all busy, or the server away) before StoreUnavailableError."""
SEARCH_SETTINGS = "SET hnsw.iterative_scan = relaxed_order; SET hnsw.ef_search = 100"
"""Every connection's HNSW settings: an iterative scan goes on until a scoped or filtered query has
its ``limit`` hits (up to ``hnsw.max_scan_tuples``), each step exploring 100 candidates."""
_RECORD_COLUMNS = [
    *(spec.name for spec in COLUMN_FIELDS),
    *("content_folded", "metadata", "record", "embedding"),
]
"""The columns an upsert rewrites: the filter table's record fields, then the stored forms."""
_INSERTED = ["key", "id", *SCOPE_FIELDS, *_RECORD_COLUMNS]
# Column names come from memcore's fixed tables, never from the caller.
_UPSERT = (
    f"INSERT INTO {{}} ({', '.join(_INSERTED)}) VALUES ({', '.join(['%s'] * len(_INSERTED))})"
    f" ON CONFLICT (key) DO UPDATE SET {', '.join(f'{c} = EXCLUDED.{c}' for c in _RECORD_COLUMNS)}"
)


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


def _configure(connection: psycopg.Connection[Any]) -> None:
    register_vector(connection)
    connection.execute(SEARCH_SETTINGS)


_inherited_pools: list[ConnectionPool[Any]] = []
"""Pools a forked child inherited from its parent: kept referenced and never touched, so that nothing
of them (no ``close()``, no libpq ``Terminate`` on the parent's sockets) ever runs in the child."""


class PgvectorStore(BaseStore):
    """memcore records in PostgreSQL with pgvector; safe to share between threads.

    Several processes may open stores on one table at once. A store object inherited through
    ``fork()`` (gunicorn ``--preload``, celery prefork) opens a pool of its own in the child on
    its first call there, leaving the parent's connections to the parent.

    :param conninfo: a libpq connection string or URI (``postgresql://user@host:port/db``).
    :param table: the records table (created if missing), ``memcore_records`` by default.
    """

    name: ClassVar[str] = "pgvector"
    schemes: ClassVar[tuple[str, ...]] = ("postgresql", "postgres")
    capabilities: ClassVar[Capabilities] = Capabilities(durable=True, ann=True, server=True)

    def __init__(self, conninfo: str, table: str = DEFAULT_TABLE) -> None:
        super().__init__()
        self._tables = Tables(table)
        self._conninfo = conninfo
        self.location = redacted(conninfo)
        with translated("open the store", self.location):
            with psycopg.connect(conninfo, connect_timeout=CONNECT_SECONDS) as connection:
                self._tables.migrate(connection, self.location)
            self._pool = self._open_pool()
            try:
                self._dimension = self._read_dimension()
            except BaseException:
                self._pool.close()
                raise

    def _worker_count(self) -> int:
        return POOL_SIZE  # one async call per pooled connection

    def _open_pool(self) -> ConnectionPool[Any]:
        pool: ConnectionPool[Any] = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=POOL_SIZE,
            kwargs={"autocommit": True},  # one round trip a read; writes open a transaction
            configure=_configure,
            timeout=WAIT_TIMEOUT,
            open=False,
        )
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except BaseException:
            pool.close()
            raise
        return pool

    def _reconnect_in_child(self) -> None:
        """In a forked child: a new pool, and the inherited one dropped without being closed.

        The inherited connections' sockets are the parent's sessions: using one would interleave
        two processes' queries and replies on it, closing one would send ``Terminate`` and end the
        parent's session. So the child never touches them: the pool is kept referenced (so it is
        never collected here) and marked closed (so that its ``__del__``, should it run at exit,
        does nothing); psycopg's ``PGconn`` only calls ``PQfinish`` in the process that connected.
        """
        inherited = self._pool
        inherited._closed = True  # its __del__ would signal worker threads that live in the parent
        _inherited_pools.append(inherited)
        with translated("reconnect in a forked process", self.location):
            self._pool = self._open_pool()

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

    @contextmanager
    def _connection(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit), errors translated. A connection the server dropped is
        replaced by the pool when it comes back: the call that met it raises StoreUnavailableError."""
        with translated(action, self.location), self._pool.connection() as connection:
            try:
                yield connection
            except psycopg.OperationalError as exc:
                if exc.sqlstate is None and not connection.broken:
                    # libpq refused the statement itself (more than 65,535 parameters...) on a
                    # connection that is fine: retrying cannot help, so it is not unavailability.
                    raise StoreError(
                        f"PostgreSQL at {self.location} refused a statement while {action}: {exc}"
                    ) from exc
                raise

    def _read_dimension(self, connection: psycopg.Connection[Any] | None = None) -> int | None:
        """The ``n`` of the embedding column's ``vector(n)`` type (``None`` while it is untyped)."""
        query = (
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'embedding'"
        )
        qualified = self._tables.name  # lowercase letters, digits and _: its own quoted form
        if connection is None:
            with self._connection("read the vector dimension") as own:
                row = own.execute(query, [qualified]).fetchone()
        else:
            row = connection.execute(query, [qualified]).fetchone()
        if row is None:
            raise StoreCorruptedError(f"the table {self._tables.name} has no embedding column")
        return None if row[0] is None or row[0] < 1 else int(row[0])

    def _fix_dimension(self, connection: psycopg.Connection[Any], dimension: int) -> None:
        """Type the column ``vector(dimension)`` unless it has a type; refuse another dimension.

        Runs inside the write's transaction: the caller caches the dimension once it committed.
        """
        connection.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(self._tables.records))
        current = self._read_dimension(connection)  # another process may have fixed it first
        if current is None:
            for statement in self._tables.fix_dimension(dimension):
                connection.execute(statement)
            current = dimension
        check_same_dimension(current, dimension)

    def _add(self, records: builtins.list[MemoryRecord], vectors: Matrix | None) -> None:
        for record in records:
            _check_no_nul(record)
            if record.scope.tenant is None:  # core refuses these first; the column is NOT NULL
                raise ScopeError(f"record {record.id} names no tenant; every PostgreSQL record has one")
        rows = [
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
        statement = sql.SQL(_UPSERT).format(self._tables.records)
        fixing = vectors is not None and self._dimension != vectors.shape[1]
        with self._connection("add records") as connection, connection.transaction():
            if vectors is not None and fixing:
                self._fix_dimension(connection, vectors.shape[1])
            with connection.cursor() as cursor:
                cursor.executemany(statement, rows)
        if vectors is not None and fixing:
            self._dimension = vectors.shape[1]  # committed: the column is vector(n) for everyone now

    def _select(
        self,
        connection: psycopg.Connection[Any],
        where: Condition,
        tail: str = "",
        tail_values: Sequence[Any] = (),
    ) -> builtins.list[MemoryRecord]:
        text, values = where
        query = sql.SQL("SELECT record FROM {} WHERE " + text + tail).format(self._tables.records)
        return [_record(row[0]) for row in connection.execute(query, [*values, *tail_values])]

    def _expresses(self, comparison: Comparison) -> bool:
        return expresses(comparison)

    def _get(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[MemoryRecord]:
        with self._connection("get records") as connection:
            return self._select(connection, _where(scope_condition(scope), ("id = ANY(%s)", [ids])))

    def _vectors(self, scope: Scope, ids: builtins.list[UUID]) -> builtins.list[tuple[UUID, Matrix]]:
        text, values = _where(scope_condition(scope), ("id = ANY(%s)", [ids]), ("embedding IS NOT NULL", []))
        query = sql.SQL("SELECT id, embedding FROM {} WHERE " + text).format(self._tables.records)
        with self._connection("read vectors") as connection:
            rows = connection.execute(query, values).fetchall()
        return [(row[0], row[1].to_numpy().astype(np.float32)) for row in rows]

    def _list(self, scope: Scope, query: ListQuery) -> builtins.list[MemoryRecord]:
        conditions = [scope_condition(scope), compile_filter(query.filter)]
        if query.before is not None:
            conditions.append(("created_at < %s", [epoch_micros(query.before)]))
        if query.after is not None:
            conditions.append(("created_at > %s", [epoch_micros(query.after)]))
        direction = "DESC" if query.order == "desc" else "ASC"
        tail = f" ORDER BY created_at {direction}, id {direction}, key {direction}"
        with self._connection("list records") as connection:
            if query.limit is None:
                return self._select(connection, _where(*conditions), tail)
            return self._select(connection, _where(*conditions), tail + " LIMIT %s", [query.limit])

    def _search(self, scope: Scope, request: SearchQuery) -> builtins.list[ScoredRecord]:
        query, text, limit = request.vector, request.text, request.limit
        conditions = [scope_condition(scope), compile_filter(request.filter)]
        if text is not None:
            conditions.append(self._text_condition(text, conditions))
        if query is None:
            records = self._list_newest(_where(*conditions), limit)
            return [ScoredRecord.of(record, 1.0) for record in records]
        if self.dimension is None:  # an embedder is bound but no vector was written yet
            return []
        where_text, values = _where(*conditions, ("embedding IS NOT NULL", []))
        statement = sql.SQL(
            "SELECT record, embedding <=> %s AS distance FROM {} WHERE "
            + where_text
            + " ORDER BY embedding <=> %s LIMIT %s"
        ).format(self._tables.records)
        vector = query[0]
        with self._connection("search") as connection:
            rows = connection.execute(statement, [vector, *values, vector, limit]).fetchall()
        # relaxed_order may return a few hits slightly out of order: settle it here.
        rows.sort(key=lambda row: row[1])
        return [ScoredRecord.of(_record(data), clamp_score(1.0 - distance)) for data, distance in rows]

    def _text_condition(self, text: str, conditions: builtins.list[Condition]) -> Condition:
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
        with self._connection("search text") as connection:
            candidates = self._select(connection, _where(*conditions, condition))
        return _keys_of([r for r in candidates if text_matches(text, r.message.content)])

    def _list_newest(self, where: Condition, limit: int) -> builtins.list[MemoryRecord]:
        with self._connection("search") as connection:
            return self._select(
                connection, where, " ORDER BY created_at DESC, id DESC, key DESC LIMIT %s", [limit]
            )

    def _count(self, scope: Scope, node: Filter | None) -> int:
        text, values = _where(scope_condition(scope), compile_filter(node))
        query = sql.SQL("SELECT count(*) FROM {} WHERE " + text).format(self._tables.records)
        with self._connection("count records") as connection:
            row = connection.execute(query, values).fetchone()
        return 0 if row is None else int(row[0])

    def _delete(self, scope: Scope, ids: builtins.list[UUID]) -> int:
        return self._delete_matching(_where(scope_condition(scope), ("id = ANY(%s)", [ids])))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        return self._delete_matching(_where(scope_condition(scope), compile_filter(node)))

    def _delete_matching(self, where: Condition) -> int:
        text, values = where
        statement = sql.SQL("DELETE FROM {} WHERE " + text).format(self._tables.records)
        with self._connection("delete records") as connection:
            return connection.execute(statement, values).rowcount

    def purge(self) -> None:
        """Rewrite the tables without their deleted rows, and the planner statistics without their values.

        ``VACUUM FULL`` rewrites both tables (and rebuilds the indexes). The table's statistics
        (``pg_statistic``, which ``ANALYZE`` and autovacuum fill with sampled values: user ids,
        role, kind) are then cleared (PostgreSQL 18's ``pg_clear_attribute_stats``) and made again
        from the rows that remain (``ANALYZE``), and ``VACUUM FULL pg_statistic`` rewrites the
        catalog's file without the old versions. That last step needs a superuser or the
        ``MAINTAIN`` privilege on ``pg_statistic`` (``pg_maintain``); without it the old versions
        stay in the catalog's file until autovacuum and later writes reuse their space, and purge
        logs a warning. It locks the table (and, briefly, the statistics) for the time it takes.
        PostgreSQL's write-ahead log and backups keep what they kept; their retention is the server's.
        """
        super().purge()
        refused: builtins.list[str] = []

        def notice(diagnostic: psycopg.errors.Diagnostic) -> None:
            if diagnostic.sqlstate == "42501":  # VACUUM skips a table it may not vacuum, with a warning
                refused.append(diagnostic.message_primary or "permission denied")

        with (
            translated("purge", self.location),
            psycopg.connect(
                self._conninfo, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT)
            ) as connection,
        ):
            for table in (self._tables.records, self._tables.meta):
                connection.execute(sql.SQL("VACUUM FULL {}").format(table))
            self._clear_statistics(connection)
            connection.execute(sql.SQL("ANALYZE {}").format(self._tables.records))
            connection.add_notice_handler(notice)
            connection.execute("VACUUM FULL pg_catalog.pg_statistic")
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
        with self._connection("read the vector space") as connection:
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
        with self._connection("save the vector space") as connection:
            connection.execute(statement, [Jsonb(value)])
        bound = self._load_vector_space()  # another process may have bound it first
        if bound != space:
            raise EmbedderMismatchError(
                f"the table {self._tables.name} is bound to {bound!r}, not to the embedder "
                f"{space.embedder!r}; use a table of its own for another embedder"
            )

    def _close(self) -> None:
        self._pool.close()


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
