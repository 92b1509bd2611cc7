"""A store hook's database work written once, run on a blocking or an asyncio connection.

A hook's logic (building statements, deciding what to run next, decoding rows into records) is a
*session*: a generator that yields each :class:`Statement` it needs executed and receives its
result (the rows, or the number of rows changed), without touching a connection itself. The
same session then runs on a psycopg ``Connection`` (:func:`run_session`, the store's sync API and
its workers) or on an ``AsyncConnection`` on the event loop (:func:`arun_session`, the async
API), the way :mod:`memcore.plans` runs the contract's logic once for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

import psycopg
from psycopg import sql

R = TypeVar("R")

OFFLOAD_ROWS = 64
"""From this many rows on, :func:`arun_session` decodes them (the session's next step) on a worker
thread instead of the event loop: decoding a record costs tens of microseconds."""


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


Session: TypeAlias = Generator[Statement, Any, R]
"""A hook's work on one connection: yields statements, receives their results, returns the hook's."""


def run_session(connection: psycopg.Connection[Any], session: Session[R]) -> R:
    """Run ``session`` on ``connection``, blocking."""
    with closing(session):
        done, value = _advance(session, None, first=True)
        while not done:
            step: Statement = value
            with connection.cursor() as cursor:
                if step.many:
                    cursor.executemany(step.query, step.params)
                else:
                    cursor.execute(step.query, step.params)
                rows = cursor.fetchall() if step.result == "rows" else None
                result = _result(step, cursor.rowcount, rows)
            done, value = _advance(session, result)
        outcome: R = value
        return outcome


async def arun_session(
    connection: psycopg.AsyncConnection[Any],
    session: Session[R],
    offload: Callable[..., Awaitable[tuple[bool, Any]]],
    *,
    heavy_start: bool = False,
) -> R:
    """Run ``session`` on ``connection`` for the event loop: the loop waits for the server, and
    ``offload(fn, *args)`` runs the CPU work that would make it late on a worker thread (the
    session's step after :data:`OFFLOAD_ROWS` rows or more, and its first step if ``heavy_start``)."""
    with closing(session):
        if heavy_start:
            done, value = await offload(_advance, session, None, True)
        else:
            done, value = _advance(session, None, first=True)
        while not done:
            step: Statement = value
            async with connection.cursor() as cursor:
                if step.many:
                    await cursor.executemany(step.query, step.params)
                else:
                    await cursor.execute(step.query, step.params)
                rows = await cursor.fetchall() if step.result == "rows" else None
                result = _result(step, cursor.rowcount, rows)
            if rows is not None and len(rows) >= OFFLOAD_ROWS:
                done, value = await offload(_advance, session, result)
            else:
                done, value = _advance(session, result)
        outcome: R = value
        return outcome


def _advance(session: Session[Any], value: Any, first: bool = False) -> tuple[bool, Any]:
    """The session's next statement, or its result once it ends: ``(done, statement or result)``
    (StopIteration cannot cross from a worker thread into an asyncio future)."""
    try:
        return False, next(session) if first else session.send(value)
    except StopIteration as stop:
        return True, stop.value


def _result(step: Statement, rowcount: int, rows: list[Any] | None) -> Any:
    if step.result == "rows":
        return rows
    return rowcount if step.result == "rowcount" else None
