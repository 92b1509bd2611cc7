"""A read's calls on the collection written once, made through chromadb's sync or async client.

A read (:mod:`memcore_chroma.reads`, the store's read hooks) is a *session*: a generator that
yields each :class:`CollectionCall` it needs and receives the result, or has the call's error
thrown in. :func:`run_calls` makes the calls on a ``Collection`` (the sync API and the store's
worker threads); :func:`arun_calls` awaits them on an ``AsyncCollection`` (the async API of a
Chroma server), whose methods have the same names and arguments.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

R = TypeVar("R")

OFFLOAD_ENTRIES = 64
"""From this many entries in a result on, :func:`arun_calls` decodes it (the session's next step)
on a worker thread instead of the event loop."""


@dataclass(frozen=True, slots=True)
class CollectionCall:
    """``collection.<method>(**kwargs)``, doing ``action`` (for error messages)."""

    action: str
    method: Literal["get", "query"]
    kwargs: dict[str, Any] = field(default_factory=dict)


Session: TypeAlias = Generator[CollectionCall, Any, R]
"""Calls on the collection, their results sent back, the read's result returned."""


def collection_call(action: str, method: Literal["get", "query"], **kwargs: Any) -> Session[Any]:
    """Inside a session: ``found = yield from collection_call("reading records", "get", ids=...)``."""
    result = yield CollectionCall(action, method, kwargs)
    return result


def run_calls(session: Session[R], make: Callable[[CollectionCall], Any]) -> R:
    """Run ``session``, making each call with ``make`` (blocking)."""
    with closing(session):
        done, value = _advance(session, None, first=True)
        while not done:
            try:
                result = make(value)
            except Exception as exc:
                done, value = _advance(session, exc, thrown=True)
            else:
                done, value = _advance(session, result)
        outcome: R = value
        return outcome


async def arun_calls(
    session: Session[R],
    make: Callable[[CollectionCall], Awaitable[Any]],
    offload: Callable[..., Awaitable[tuple[bool, Any]]],
) -> R:
    """Run ``session`` for the event loop: each call awaited with ``make``; the session's step
    after a result of :data:`OFFLOAD_ENTRIES` entries or more run by ``offload(fn, *args)`` on a
    worker thread (decoding records costs tens of microseconds each)."""
    with closing(session):
        done, value = _advance(session, None, first=True)
        while not done:
            try:
                result = await make(value)
            except Exception as exc:
                done, value = _advance(session, exc, thrown=True)
                continue
            if _entries(result) >= OFFLOAD_ENTRIES:
                done, value = await offload(_advance, session, result)
            else:
                done, value = _advance(session, result)
        outcome: R = value
        return outcome


def _advance(
    session: Session[Any], value: Any, first: bool = False, thrown: bool = False
) -> tuple[bool, Any]:
    """The session's next call, or its result: ``(done, call or result)`` (StopIteration cannot
    cross from a worker thread into an asyncio future)."""
    try:
        if first:
            return False, next(session)
        return False, session.throw(value) if thrown else session.send(value)
    except StopIteration as stop:
        return True, stop.value


def _entries(result: Any) -> int:
    ids = result.get("ids") if isinstance(result, dict) else None
    if not ids:
        return 0
    return len(ids[0]) if isinstance(ids[0], list) else len(ids)
