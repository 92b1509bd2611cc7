"""memcore's tables in PostgreSQL, their creation and migrations.

One table of records per store (``memcore_records`` by default, ``?collection=`` to
choose another), and one small table of settings beside it (``<table>_meta``:
schema version, embedder binding)::

    key         uuid primary key         memcore.scope.storage_id(scope, id): a record is its scope and id
    id          uuid                     the record's UUID (indexed; another scope may use it too)
    tenant, user_id, agent_id, session_id  text  the scope (tenant first in the index)
    role, kind  text
    created_at  bigint                   microseconds since the epoch (exact, sortable)
    expires_at  bigint                   when the record expires, in microseconds; NEVER_MICROS if never
    content_folded  text                 the content case-folded, NUL as U+FFFF, for text search
    metadata    jsonb                    the record's metadata, for filters
    record      text                     the record's exact JSON, from which reads rebuild it
    embedding   vector                   its unit vector, or NULL; typed vector(n) once n is known

The scope columns get one B-tree index (tenant, user_id, agent_id, session_id,
created_at), which also serves ordered reads (every read adds ``expires_at > now``
as a filter on the rows it reaches); ``expires_at`` a partial B-tree index of the
rows that expire (``expires_at < NEVER_MICROS``), which serves ``sweep()``; the
embedding an HNSW index with cosine distance, created when the first vector fixes
the dimension. Every
statement names tables through :class:`psycopg.sql.Identifier`, never by
formatting text. The schema's version is kept in the meta table;
:meth:`Tables.migrate` creates the tables or brings older ones up to date when a
store opens, under an advisory lock, and refuses tables of a newer version (and pgvector
older than 0.8, whose index scans stop at ``ef_search`` candidates).

Versions: 1 the tables; 2 no planner statistics on the columns holding what users wrote
(``content_folded``, ``metadata``, ``record``, ``embedding``: ``ANALYZE`` would copy sampled values
into ``pg_statistic``), and NUL kept in the folded content as :data:`NUL_MARK` (it was dropped, so
that ``"cd"`` matched ``"abc\\x00def"``); 3 the primary key is ``key``, the record's scope and id,
not ``id`` alone, so that the same id in two scopes is two records (existing rows get their key);
4 the ``expires_at`` column (existing rows get :data:`NEVER_MICROS`: they never expire) and its
partial index.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from memcore.errors import InvalidInputError, StoreCorruptedError, StoreError
from memcore.records import NEVER_EXPIRES, epoch_micros
from memcore.scope import Scope, storage_id

SCHEMA_VERSION: Final = 4
DEFAULT_TABLE: Final = "memcore_records"
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")

NUL_MARK: Final = "\uffff"
"""What a NUL of the content becomes in its folded copy (PostgreSQL text cannot hold NUL): a
noncharacter, so that a text without NUL or it matches the copy exactly where it matches the content."""

NEVER_MICROS: Final = epoch_micros(NEVER_EXPIRES)
"""The ``expires_at`` of a record that never expires (2**53 - 1): the column's default, so that
rows written before version 4, or by statements that leave the column out, never expire."""

_UNSAMPLED = ("content_folded", "metadata", "record", "embedding")
"""Columns ``ANALYZE`` never samples: their values would be copied into ``pg_statistic``."""

Step = sql.Composed | Callable[[psycopg.Connection[Any]], None]


def fold_content(content: str) -> str:
    """The copy of a record's content that text search compares: case-folded, NUL as :data:`NUL_MARK`."""
    return content.casefold().replace("\x00", NUL_MARK)


def check_table_name(name: str) -> str:
    """A table name memcore accepts: lowercase letters, digits and ``_``, at most 48 characters."""
    if name.endswith(RESERVED_SUFFIXES):
        raise InvalidInputError(
            f"table name {name!r} ends with one of {RESERVED_SUFFIXES}, kept for its own objects"
        )
    if not _TABLE_NAME.fullmatch(name):
        raise InvalidInputError(
            f"table name {name!r} must be 1-48 lowercase letters, digits and _, not starting with a digit"
        )
    return name


MIN_PGVECTOR = (0, 8)
"""Iterative index scans (scoped searches that still return ``limit`` hits) came in pgvector 0.8."""

RESERVED_SUFFIXES = ("_meta", "_scope", "_embedding", "_record_id", "_expiry")
"""Names of a table's own objects: not names of records tables."""


def _check_pgvector(connection: psycopg.Connection[Any], location: str) -> None:
    row = connection.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    version = tuple(int(part) for part in re.findall(r"\d+", str(row[0]))[:2]) if row else ()
    if version < MIN_PGVECTOR:
        raise StoreError(
            f"PostgreSQL at {location} has pgvector {row[0] if row else 'missing'}; memcore-pgvector needs "
            "0.8 or newer (ALTER EXTENSION vector UPDATE, or see docker/pgvector/)"
        )


class Tables:
    """The SQL identifiers of one store's tables and indexes."""

    def __init__(self, name: str) -> None:
        self.name = check_table_name(name)
        self.records = sql.Identifier(name)
        self.meta = sql.Identifier(f"{name}_meta")
        self.scope_index = sql.Identifier(f"{name}_scope")
        self.vector_index = sql.Identifier(f"{name}_embedding")
        self.id_index = sql.Identifier(f"{name}_record_id")
        self.expiry_index = sql.Identifier(f"{name}_expiry")

    def migrations(self) -> list[tuple[int, list[Step]]]:
        """Each schema version and the statements that bring the previous one to it, in order."""
        version_1: list[Step] = [
            sql.SQL(
                "CREATE TABLE {} ("
                " id uuid PRIMARY KEY,"
                " tenant text NOT NULL, user_id text, agent_id text, session_id text,"
                " role text NOT NULL, kind text NOT NULL, created_at bigint NOT NULL,"
                " content_folded text NOT NULL, metadata jsonb NOT NULL, record text NOT NULL,"
                " embedding vector)"
            ).format(self.records),
            sql.SQL("CREATE INDEX {} ON {} (tenant, user_id, agent_id, session_id, created_at)").format(
                self.scope_index, self.records
            ),
        ]
        version_2: list[Step] = [
            *(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET STATISTICS 0").format(
                    self.records, sql.Identifier(column)
                )
                for column in _UNSAMPLED
            ),
            self._refold_nul_rows,
        ]
        version_3: list[Step] = [
            sql.SQL("ALTER TABLE {} ADD COLUMN key uuid").format(self.records),
            self._fill_keys,
            sql.SQL("ALTER TABLE {} ALTER COLUMN key SET NOT NULL").format(self.records),
            self._drop_primary_key,
            sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (key)").format(self.records),
            sql.SQL("CREATE INDEX {} ON {} (id)").format(self.id_index, self.records),
        ]
        # Adding a column with a constant default rewrites no row (PostgreSQL 11+).
        version_4: list[Step] = [
            sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS expires_at bigint NOT NULL DEFAULT {}").format(
                self.records, sql.Literal(NEVER_MICROS)
            ),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (expires_at) WHERE expires_at < {}").format(
                self.expiry_index, self.records, sql.Literal(NEVER_MICROS)
            ),
        ]
        return [(1, version_1), (2, version_2), (3, version_3), (4, version_4)]

    def _fill_keys(self, connection: psycopg.Connection[Any]) -> None:
        """Give every row its :func:`~memcore.scope.storage_id` (rows of version 2 had the id as key)."""
        rows = connection.execute(
            sql.SQL("SELECT id, tenant, user_id, agent_id, session_id FROM {}").format(self.records)
        ).fetchall()
        update = sql.SQL("UPDATE {} SET key = %s WHERE id = %s").format(self.records)
        keys = []
        for row_id, tenant, user_id, agent_id, session_id in rows:
            try:
                scope = Scope(tenant=tenant, user_id=user_id, agent_id=agent_id, session_id=session_id)
            except InvalidInputError as error:
                raise StoreCorruptedError(
                    f"the row {row_id} of {self.name} has an invalid scope: {error}"
                ) from None
            keys.append((storage_id(scope, row_id), row_id))
        with connection.cursor() as cursor:
            cursor.executemany(update, keys)

    def _drop_primary_key(self, connection: psycopg.Connection[Any]) -> None:
        """Drop the primary key on ``id``, whatever PostgreSQL named it."""
        row = connection.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
            [sql.Identifier(self.name).as_string(connection)],
        ).fetchone()
        if row is not None:
            connection.execute(
                sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(self.records, sql.Identifier(row[0]))
            )

    def _refold_nul_rows(self, connection: psycopg.Connection[Any]) -> None:
        """Fold again the content of rows written when the folded copy dropped NUL (their JSON
        escapes it as ``\\u0000``; a few more rows may match that text, and are folded unchanged)."""
        rows = connection.execute(
            sql.SQL("SELECT id, record FROM {} WHERE strpos(record, %s) > 0").format(self.records),
            ["\\u0000"],
        ).fetchall()
        update = sql.SQL("UPDATE {} SET content_folded = %s WHERE id = %s").format(self.records)
        for row_id, data in rows:
            try:
                content = json.loads(data)["message"]["content"]
            except (ValueError, KeyError, TypeError):
                continue  # an invalid row: reads report it as StoreCorruptedError
            if isinstance(content, str):
                connection.execute(update, [fold_content(content), row_id])

    def migrate(self, connection: psycopg.Connection[Any], location: str) -> None:
        """Create the tables, or bring them to :data:`SCHEMA_VERSION`, in one transaction.

        A transaction-scoped advisory lock on the table's name makes concurrent first opens
        (several processes, several threads) wait for each other instead of racing on
        ``CREATE TABLE``; the version lives in the meta table.
        """
        with connection.transaction():
            # One lock for every memcore table of the database: CREATE EXTENSION races too.
            connection.execute("SELECT pg_advisory_xact_lock(hashtext('memcore-pgvector schema'))")
            connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
            _check_pgvector(connection, location)
            connection.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value jsonb NOT NULL)").format(
                    self.meta
                )
            )
            read = sql.SQL("SELECT value FROM {} WHERE key = 'schema_version'").format(self.meta)
            row = connection.execute(read).fetchone()
            current = 0 if row is None else row[0]
            if not isinstance(current, int) or current > SCHEMA_VERSION:
                raise StoreCorruptedError(
                    f"the table {self.name} at {location} has memcore schema version {current!r}; this "
                    f"plugin knows versions up to {SCHEMA_VERSION}: upgrade memcore-pgvector"
                )
            for version, statements in self.migrations():
                if version > current:
                    for statement in statements:
                        if isinstance(statement, sql.Composed):
                            connection.execute(statement)
                        else:
                            statement(connection)
            if current != SCHEMA_VERSION:
                write = sql.SQL(
                    "INSERT INTO {} (key, value) VALUES ('schema_version', %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ).format(self.meta)
                connection.execute(write, [Jsonb(SCHEMA_VERSION)])

    def drop(self, connection: psycopg.Connection[Any]) -> None:
        """Drop the records table and its meta table, if they exist (their indexes go with them)."""
        for table in (self.records, self.meta):
            connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))

    def fix_dimension(self, dimension: int) -> list[sql.Composed]:
        """Type the embedding column ``vector(dimension)`` and index it (HNSW, cosine)."""
        return [
            sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE vector({})").format(
                self.records, sql.Literal(dimension)
            ),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
                self.vector_index, self.records
            ),
        ]
