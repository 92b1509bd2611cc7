"""A bounded pool of worker threads that keeps blocking work off an event loop.

The async twins of stores, memories and embedders that have no native async client run
their synchronous code here: one pool per store (or embedder), sized to how many calls its
engine serves at once, so that sixty-four agents on one loop make at most that many
threads compete for the engine and the GIL, never sixty-four.

The pool starts its threads on first use (a program that never awaits pays nothing), copies
the caller's :mod:`contextvars` into the worker (tracing context follows the call), and is
dropped in a forked child, whose copy of the parent's threads does not run.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from memcore.errors import InvalidInputError

P = ParamSpec("P")
R = TypeVar("R")

_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


class WorkerPool:
    """Up to ``size`` threads named ``memcore-<name>``, started when first needed.

    :param size: how many calls run at once; more wait in line.
    :param name: names the threads (in stack dumps and profilers).
    :param closed_error: makes the error a call after :meth:`shutdown` raises.
    :raises InvalidInputError: if ``size`` is not a positive integer.
    """

    def __init__(self, size: int, name: str, *, closed_error: Callable[[], Exception] | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidInputError(f"a worker pool needs a positive size, got {size!r}")
        self.size, self.name = size, name
        self._executor: ThreadPoolExecutor | None = None
        self._worker_ids: set[int] = set()
        self._lock = threading.Lock()
        self._shut = False
        self._closed_error = closed_error or (lambda: RuntimeError(f"the worker pool {name!r} is shut down"))
        _pools.add(self)

    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``fn(*args, **kwargs)`` on a worker and wait for it without blocking the loop.

        Cancelling the awaiting task does not stop a call a worker has started: it runs to its
        end (a batch write lands whole), and its result is dropped.

        :raises Exception: ``closed_error()`` after :meth:`shutdown`.
        """
        return await asyncio.wrap_future(self.submit(fn, *args, **kwargs))

    def submit(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Start ``fn(*args, **kwargs)`` on a worker, with the caller's context variables.

        :raises Exception: ``closed_error()`` after :meth:`shutdown`.
        """
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        with self._lock:  # a shutdown between starting and submitting would raise RuntimeError
            return self._started().submit(call)

    def in_worker(self) -> bool:
        """Whether the calling thread is one of this pool's workers."""
        return threading.get_ident() in self._worker_ids

    def shutdown(self) -> None:
        """Refuse new calls and wait for the ones already submitted (not when called from a worker,
        which would wait for itself)."""
        with self._lock:
            self._shut = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=not self.in_worker())

    def _started(self) -> ThreadPoolExecutor:
        """The executor, started if needed (call with ``_lock`` held)."""
        if self._shut:
            raise self._closed_error()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self.size, thread_name_prefix=f"memcore-{self.name}", initializer=self._enter_worker
            )
        return self._executor

    def _enter_worker(self) -> None:
        self._worker_ids.add(threading.get_ident())

    def _forget_parent_threads(self) -> None:
        self._lock = threading.Lock()
        self._executor = None
        self._worker_ids = set()


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget_parent_threads()


os.register_at_fork(after_in_child=_after_fork_in_child)
