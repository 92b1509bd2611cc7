"""An async client that belongs to one event loop: the first loop that calls the store.

Async clients (psycopg's ``AsyncConnection``, httpx's ``AsyncClient`` inside chromadb's and
qdrant-client's async clients) hold sockets and futures of the loop they were made on, and fail
or hang when another loop uses them. A store with native async hooks therefore makes its async
client for the first loop that calls it (:meth:`LoopBound.serves`); its calls from another loop
run on the store's workers through the blocking client, with the same results (see
:meth:`memcore.store.BaseStore._native_on_this_loop`). Once that first loop is closed, the next
loop gets a client of its own; in a forked child, none is used until the store reconnected.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

CLOSE_TIMEOUT = 30.0
"""Seconds :meth:`LoopBound.close` waits for the client to close on its loop, from another thread,
before it drops the client instead."""

_inherited: list[object] = []
"""Clients a forked child inherited: kept referenced and never touched (their sockets are the
parent's: closing one would end the parent's session, using one would mix two processes' replies)."""
_closing: set[asyncio.Future[Any]] = set()


class LoopBound(Generic[T]):
    """The async client of one store, made for the first loop that calls it.

    :param make: makes the client, on the loop's thread (it may bind to that loop).
    :param aclose: closes the client, awaited on its loop.
    :param drop: lets go of a client whose loop no longer runs (``aclose`` cannot run there).
    """

    def __init__(
        self,
        make: Callable[[], T],
        aclose: Callable[[T], Awaitable[None]],
        drop: Callable[[T], None] = lambda client: None,
    ) -> None:
        self._make, self._aclose, self._drop = make, aclose, drop
        self._client: T | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._process = os.getpid()

    def serves(self) -> bool:
        """Whether the running loop's calls may use the client: it is the loop the client belongs
        to, or the first to ask (the client is then made for it). ``False`` once closed, and in a
        forked child until :meth:`forget_after_fork`."""
        loop = asyncio.get_running_loop()
        if self._process != os.getpid():  # before the lock: a parent thread may have held it at the fork
            return False
        if self._loop is loop and not self._closed and not loop.is_closed():
            return True  # every call of a bound loop after the first: no lock
        with self._lock:
            if self._closed:
                return False
            if self._client is not None and self._loop is not None and self._loop.is_closed():
                self._drop(self._client)
                self._client = self._loop = None
            if self._client is None:
                self._client, self._loop = self._make(), loop
            return self._loop is loop

    def client(self) -> T | None:
        """The client, for a call on the loop it belongs to; ``None`` if it is closed or reset (by a
        fork) since the call started."""
        client, loop = self._client, self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return client if loop is running else None

    def forget_after_fork(self) -> None:
        """In a forked child: keep the inherited client referenced and untouched; the next loop
        that asks gets a new one."""
        self._lock = threading.Lock()  # the parent may have held it at the fork
        if self._client is not None:
            _inherited.append(self._client)
        self._client = self._loop = None
        self._process = os.getpid()

    def close(self) -> None:
        """Close the client (from any thread): awaited on its loop from another thread, scheduled
        there when called on that loop, dropped if the loop no longer runs."""
        if self._process != os.getpid():  # a forked child's client is the parent's
            self._closed = True
            return
        with self._lock:
            self._closed = True
            client, loop = self._client, self._loop
            self._client = self._loop = None
        if client is None or loop is None:
            return
        if not loop.is_running():
            self._drop(client)
            return
        try:
            on_the_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_the_loop = False
        if on_the_loop:
            closing = loop.create_task(_awaited(self._aclose(client)))
            _closing.add(closing)
            closing.add_done_callback(_closing.discard)
        else:
            closing_there = asyncio.run_coroutine_threadsafe(_awaited(self._aclose(client)), loop)
            try:
                closing_there.result(timeout=CLOSE_TIMEOUT)
            except TimeoutError:  # the loop runs but does not get to it (blocked, or at exit)
                closing_there.cancel()
                self._drop(client)


async def _awaited(closing: Awaitable[None]) -> None:
    await closing
