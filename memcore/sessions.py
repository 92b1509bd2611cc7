"""A backend's client calls written once, made through a blocking or an asyncio client.

A backend hook's logic (which calls to make, in which order, and what to make of their results)
is a *session*: a generator that yields each call it needs, as an object of the backend's own
(a SQL statement, a call on a collection), and receives its result, or has its error thrown in.
It never touches a client itself, so the same session runs through a blocking client
(:func:`run_session`: the sync API and the store's workers) or is awaited through an async one
(:func:`arun_session`: the async variant of the hook, on the event loop), the way
:mod:`memcore.plans` runs the contract's own logic once for both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Generator
from contextlib import closing
from typing import Any, TypeAlias, TypeVar

C = TypeVar("C")
R = TypeVar("R")

Session: TypeAlias = Generator[C, Any, R]
"""Yields calls of type ``C``, receives their results, returns the hook's result ``R``."""

Offload: TypeAlias = Callable[..., Awaitable[tuple[bool, Any]]]
"""Runs ``fn(*args)`` on a worker thread and awaits it: a store's ``WorkerPool.run``."""

OFFLOAD_AT = 64
"""From this many rows, points or records on, the CPU work on them (decoding a result, encoding a
batch: tens of microseconds each) runs on a worker thread instead of the event loop."""


def long_list(result: Any) -> bool:
    """Whether ``result`` is a list of :data:`OFFLOAD_AT` items or more: :func:`arun_session`'s
    default test of a result to decode on a worker."""
    return isinstance(result, list) and len(result) >= OFFLOAD_AT


def run_session(session: Session[C, R], make: Callable[[C], Any]) -> R:
    """Run ``session``, making each call with ``make`` (blocking)."""
    with closing(session):
        done, value = advance(session, None, first=True)
        while not done:
            try:
                result = make(value)
            except Exception as exc:
                done, value = advance(session, exc, thrown=True)
            else:
                done, value = advance(session, result)
        outcome: R = value
        return outcome


async def arun_session(
    session: Session[C, R],
    make: Callable[[C], Awaitable[Any]],
    offload: Offload,
    *,
    heavy: Callable[[Any], bool] = long_list,
    heavy_start: bool = False,
) -> R:
    """Run ``session`` for the event loop: each call awaited with ``make``, so that the loop only
    waits for the engine; the CPU work that would make it late runs through ``offload`` on a worker
    thread instead: the session's step after a result that is ``heavy`` (many rows to decode), and
    its first step if ``heavy_start`` (a large batch to encode)."""
    try:
        if heavy_start:
            done, value = await offload(advance, session, None, True)
        else:
            done, value = advance(session, None, first=True)
        while not done:
            try:
                result = await make(value)
            except Exception as exc:
                done, value = advance(session, exc, thrown=True)
                continue
            if heavy(result):
                done, value = await offload(advance, session, result)
            else:
                done, value = advance(session, result)
        outcome: R = value
        return outcome
    finally:
        # Cancelled while a worker runs a step, the session is still executing there (close()
        # would raise ValueError over the cancellation): that worker ends it.
        with contextlib.suppress(ValueError):
            session.close()


def advance(
    session: Session[Any, Any], value: Any, first: bool = False, thrown: bool = False
) -> tuple[bool, Any]:
    """The session's next call, or its result once it ends: ``(done, call or result)``
    (StopIteration cannot cross from a worker thread into an asyncio future)."""
    try:
        if first:
            return False, next(session)
        return False, session.throw(value) if thrown else session.send(value)
    except StopIteration as stop:
        return True, stop.value
