"""The raw psycopg baseline of ``memcore bench``'s adapter overhead (see :mod:`memcore.bench.raw`).

A table of the same shape and indexes as the store's (its own name: the store's
plus ``_raw``), written with the same rows (built before the clock starts:
the JSON, the case-folded content, the metadata), searched by the same scoped
query through the HNSW index with the same session settings, its JSON records parsed on
read. What remains between the two sides is memcore's own work: validation,
building rows, decoding into models.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.types.json import Jsonb

from memcore.records import MemoryRecord, epoch_micros
from memcore.scope import Scope, storage_id
from memcore.validation import Matrix
from memcore_pgvector.connections import SEARCH_SETTINGS
from memcore_pgvector.filters import scope_condition
from memcore_pgvector.schema import Tables


class RawPsycopg:
    """One psycopg connection and a table ``<table>_raw``, dropped on close."""

    def __init__(self, conninfo: str, table: str) -> None:
        self._tables = Tables(f"{table}_raw")
        self._connection = psycopg.connect(conninfo, autocommit=True)
        try:
            self._tables.migrate(self._connection, "the raw baseline")
            register_vector(self._connection)
            self._connection.execute(SEARCH_SETTINGS)
        except BaseException:
            self._connection.close()
            raise
        self._dimension: int | None = None

    def prepare(self, records: Sequence[MemoryRecord], vectors: Matrix) -> list[tuple[Any, ...]]:
        """The rows the store would write (the column is typed on the first call)."""
        if self._dimension is None:
            self._dimension = vectors.shape[1]
            for statement in self._tables.fix_dimension(self._dimension):
                self._connection.execute(statement)
        return [
            (
                storage_id(r.scope, r.id),
                r.id,
                r.scope.tenant,
                r.scope.user_id,
                r.scope.agent_id,
                r.scope.session_id,
                r.message.role,
                r.kind,
                epoch_micros(r.created_at),
                r.message.content.casefold(),
                Jsonb(r.metadata),
                r.model_dump_json(),
                vector,
            )
            for r, vector in zip(records, vectors, strict=True)
        ]

    def add(self, prepared: list[tuple[Any, ...]]) -> None:
        """Upsert the rows in one transaction."""
        statement = sql.SQL(
            "INSERT INTO {} (key, id, tenant, user_id, agent_id, session_id, role, kind, created_at,"
            " content_folded, metadata, record, embedding)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (key) DO UPDATE SET record = EXCLUDED.record, embedding = EXCLUDED.embedding"
        ).format(self._tables.records)
        with self._connection.transaction(), self._connection.cursor() as cursor:
            cursor.executemany(statement, prepared)

    def search(self, scope: Scope, vector: Matrix, limit: int) -> list[Any]:
        """The scoped nearest records, through the HNSW index, parsed."""
        where, values = scope_condition(scope)
        statement = sql.SQL(
            "SELECT record, embedding <=> %s FROM {} WHERE " + where + " AND embedding IS NOT NULL"
            " ORDER BY embedding <=> %s LIMIT %s"
        ).format(self._tables.records)
        rows = self._connection.execute(statement, [vector, *values, vector, limit]).fetchall()
        return [json.loads(row[0]) for row in rows]

    def get(self, scope: Scope, ids: Sequence[UUID]) -> list[Any]:
        """A scoped read by id, parsed."""
        where, values = scope_condition(scope)
        statement = sql.SQL("SELECT record FROM {} WHERE " + where + " AND id = ANY(%s)").format(
            self._tables.records
        )
        return [json.loads(row[0]) for row in self._connection.execute(statement, [*values, list(ids)])]

    def delete(self, scope: Scope, ids: Sequence[UUID]) -> None:
        """A scoped delete by id."""
        where, values = scope_condition(scope)
        statement = sql.SQL("DELETE FROM {} WHERE " + where + " AND id = ANY(%s)").format(
            self._tables.records
        )
        self._connection.execute(statement, [*values, list(ids)])

    def close(self) -> None:
        """Drop the baseline's tables and disconnect."""
        self._tables.drop(self._connection)
        self._connection.close()
