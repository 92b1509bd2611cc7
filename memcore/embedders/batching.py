"""One model's worker: every ``aembed`` waiting for it is embedded in one call.

Sixty-four agents on one event loop each ask the model for a few texts at once. One forward
pass over all their texts costs far less than sixty-four small ones (and holds the model's
threads once, not sixty-four times), so requests that arrive while the model is busy wait
together and go in the next call, in arrival order. Each gets back exactly its own rows.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from memcore.errors import InvalidInputError, PluginError
from memcore.validation import Matrix
from memcore.workers import WorkerPool

_workers: weakref.WeakSet[BatchingWorker] = weakref.WeakSet()

MAX_BATCH_TEXTS = 512
"""The most texts one call to the model takes; requests beyond it go in the next call."""


def checked_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, refused as ``embed()`` refuses it: a bad request must fail alone,
    before it shares a call with others.

    :raises InvalidInputError: for a bare string or a non-string item.
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidInputError("embed() takes a sequence of strings; wrap a single text as [text]")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidInputError(f"embed() takes strings, got {type(text).__name__} at index {index}")
    return list(texts)


class BatchingWorker:
    """Runs ``embed`` on one worker thread, over every request waiting for it at once.

    :param embed: the model's ``embed``.
    :param name: names the thread.
    """

    def __init__(self, embed: Callable[[list[str]], Matrix], name: str) -> None:
        self._embed = embed
        self._pool = WorkerPool(1, name)
        self._lock = threading.Lock()
        self._waiting: list[tuple[list[str], Future[Matrix]]] = []
        self._flush_scheduled = False
        _workers.add(self)

    async def embed(self, texts: Sequence[str]) -> Matrix:
        """The rows of ``texts``, embedded with whatever else is waiting.

        :raises InvalidInputError: for bad ``texts`` (before anything is queued).
        """
        request: Future[Matrix] = Future()
        with self._lock:
            self._waiting.append((checked_texts(texts), request))
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule:
            self._pool.submit(self._flush)
        return await asyncio.wrap_future(request)

    def _flush(self) -> None:
        with self._lock:
            taken, size = 1, len(self._waiting[0][0])
            while taken < len(self._waiting) and size + len(self._waiting[taken][0]) <= MAX_BATCH_TEXTS:
                size += len(self._waiting[taken][0])
                taken += 1
            batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
            if self._waiting:
                self._pool.submit(self._flush)
            else:
                self._flush_scheduled = False
        # A request whose caller gave up (cancelled) is left out of the call.
        batch = [(texts, request) for texts, request in batch if request.set_running_or_notify_cancel()]
        if not batch:
            return
        texts = [text for request_texts, _ in batch for text in request_texts]
        try:
            matrix = self._embed(texts)
            if len(matrix) != len(texts):
                raise PluginError(f"the embedder returned {len(matrix)} rows for {len(texts)} texts")
        except BaseException as exc:  # the model's failure is every waiting request's
            for _, request in batch:
                request.set_exception(exc)
            return
        start = 0
        for request_texts, request in batch:
            request.set_result(matrix[start : start + len(request_texts)].copy())
            start += len(request_texts)


def _after_fork_in_child() -> None:
    """The parent's waiting requests belong to the parent's loop, and a flush it scheduled will
    never run here: start empty."""
    for worker in list(_workers):
        worker._lock = threading.Lock()
        worker._waiting = []
        worker._flush_scheduled = False


os.register_at_fork(after_in_child=_after_fork_in_child)
