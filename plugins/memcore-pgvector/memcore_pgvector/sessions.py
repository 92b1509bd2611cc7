"""A store hook's database work written once, run on a blocking or an asyncio connection.

A hook's statements are a session (:mod:`memcore.sessions`) yielding :class:`Statement` objects:
:func:`run_statements` executes them on a psycopg ``Connection`` (the sync API and the store's
workers), :func:`arun_statements` on an ``AsyncConnection`` on the event loop (the async API).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

import psycopg
from psycopg import sql

from memcore import sessions
from memcore.sessions import Offload

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement a session needs executed.

    :param result: ``"rows"`` answers with every row fetched, ``"rowcount"`` with the number of rows
        changed, ``"none"`` with ``None``.
    :param many: run it once per parameter row of ``params`` (``executemany``).
    """

    query: sql.SQL | sql.Composed | str
    params: Sequence[Any] = ()
    result: Literal["rows", "rowcount", "none"] = "rows"
    many: bool = False


Session: TypeAlias = sessions.Session[Statement, R]


def run_statements(connection: psycopg.Connection[Any], session: Session[R]) -> R:
    """Run ``session`` on ``connection``, blocking."""

    def execute(step: Statement) -> Any:
        with connection.cursor() as cursor:
            if step.many:
                cursor.executemany(step.query, step.params)
            else:
                cursor.execute(step.query, step.params)
            return _result(step, cursor.rowcount, cursor.fetchall() if step.result == "rows" else None)

    return sessions.run_session(session, execute)


async def arun_statements(
    connection: psycopg.AsyncConnection[Any],
    session: Session[R],
    offload: Offload,
    *,
    heavy_start: bool = False,
) -> R:
    """Run ``session`` on ``connection`` for the event loop (:func:`memcore.sessions.arun_session`):
    rows of :data:`~memcore.sessions.OFFLOAD_AT` or more decoded, and the first step if ``heavy_start``,
    on a worker."""

    async def execute(step: Statement) -> Any:
        async with connection.cursor() as cursor:
            if step.many:
                await cursor.executemany(step.query, step.params)
            else:
                await cursor.execute(step.query, step.params)
            rows = await cursor.fetchall() if step.result == "rows" else None
            return _result(step, cursor.rowcount, rows)

    return await sessions.arun_session(session, execute, offload, heavy_start=heavy_start)


def _result(step: Statement, rowcount: int, rows: list[Any] | None) -> Any:
    if step.result == "rows":
        return rows
    return rowcount if step.result == "rowcount" else None
