"""memcore's tables in PostgreSQL, their creation and migrations.

One table of records per store (``memcore_records`` by default, ``?table=`` to
choose another), and one small table of settings beside it (``<table>_meta``:
schema version, vector dimension, embedder binding)::

    id          uuid primary key         the record's UUID
    tenant, user_id, agent_id, session_id  text  the scope (tenant first in the index)
    role, kind  text
    created_at  bigint                   microseconds since the epoch (exact, sortable)
    content_folded  text                 the content case-folded, for text search
    metadata    jsonb                    the record's metadata, for filters
    record      text                     the record's exact JSON, from which reads rebuild it
    embedding   vector                   its unit vector, or NULL; typed vector(n) once n is known

The scope columns get one B-tree index (tenant, user_id, agent_id, session_id,
created_at), which also serves ordered reads; the embedding an HNSW index with
cosine distance, created when the first vector fixes the dimension. Every
statement names tables through :class:`psycopg.sql.Identifier`, never by
formatting text.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

from psycopg import sql

from memcore.errors import InvalidInputError

SCHEMA_VERSION: Final = 1
DEFAULT_TABLE: Final = "memcore_records"
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def micros(moment: datetime) -> int:
    """Microseconds since the epoch: exact for every datetime."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def check_table_name(name: str) -> str:
    """A table name memcore accepts: lowercase letters, digits and ``_``, at most 48 characters."""
    if not _TABLE_NAME.fullmatch(name):
        raise InvalidInputError(
            f"table name {name!r} must be 1-48 lowercase letters, digits and _, not starting with a digit"
        )
    return name


class Tables:
    """The SQL identifiers of one store's tables and indexes."""

    def __init__(self, name: str) -> None:
        self.name = check_table_name(name)
        self.records = sql.Identifier(name)
        self.meta = sql.Identifier(f"{name}_meta")
        self.scope_index = sql.Identifier(f"{name}_scope")
        self.vector_index = sql.Identifier(f"{name}_embedding")

    def create(self) -> list[sql.Composed]:
        """The statements that create whatever is missing (safe to run on every open)."""
        return [
            sql.SQL("CREATE EXTENSION IF NOT EXISTS vector").format(),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " id uuid PRIMARY KEY,"
                " tenant text NOT NULL, user_id text, agent_id text, session_id text,"
                " role text NOT NULL, kind text NOT NULL, created_at bigint NOT NULL,"
                " content_folded text NOT NULL, metadata jsonb NOT NULL, record text NOT NULL,"
                " embedding vector)"
            ).format(self.records),
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (tenant, user_id, agent_id, session_id, created_at)"
            ).format(self.scope_index, self.records),
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value jsonb NOT NULL)").format(
                self.meta
            ),
        ]

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
