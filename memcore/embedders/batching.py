"""One model's worker: every ``aembed`` waiting for it is embedded in one call.

Sixty-four agents on one event loop each ask the model for a few texts at once. One forward
pass over all their texts costs far less than sixty-four small ones (and holds the model's
threads once, not sixty-four times), so requests that arrive while the model is busy wait
together and go in the next call, in arrival order. Each gets back exactly its own rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Protocol

import numpy as np

from memcore.errors import InvalidInputError, PluginError
from memcore.telemetry import batch_scope, capture_context
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
        # Each request with its caller's tracing context, under which the model call is traced.
        self._waiting: list[tuple[list[str], Future[Matrix], object]] = []
        self._flush_scheduled = False
        _workers.add(self)

    async def embed(self, texts: Sequence[str]) -> Matrix:
        """The rows of ``texts``, embedded with whatever else is waiting.

        :raises InvalidInputError: for bad ``texts`` (before anything is queued).
        """
        request: Future[Matrix] = Future()
        entry = (checked_texts(texts), request, capture_context())
        with self._lock:
            self._waiting.append(entry)
            if not self._flush_scheduled:
                self._schedule_flush()
        return await asyncio.wrap_future(request)

    def _schedule_flush(self) -> None:
        """Under ``_lock``: have the worker flush. If it cannot (the interpreter is shutting down),
        every waiting request fails with that error instead of waiting for a flush that never comes."""
        try:
            self._pool.submit(self._flush)
        except BaseException as exc:
            for _, request, _ in self._waiting:
                with contextlib.suppress(InvalidStateError):  # cancelled meanwhile
                    request.set_exception(exc)
            self._waiting = []
            return
        self._flush_scheduled = True

    def _flush(self) -> None:
        with self._lock:
            taken, size = 1, len(self._waiting[0][0])
            while taken < len(self._waiting) and size + len(self._waiting[taken][0]) <= MAX_BATCH_TEXTS:
                size += len(self._waiting[taken][0])
                taken += 1
            batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
            self._flush_scheduled = False
            if self._waiting:
                self._schedule_flush()
        # A request whose caller gave up (cancelled) is left out of the call.
        batch = [entry for entry in batch if entry[1].set_running_or_notify_cancel()]
        if batch:
            with batch_scope([caller for _, _, caller in batch]):
                self._answer([(texts, request) for texts, request, _ in batch])

    def _answer(self, batch: list[tuple[list[str], Future[Matrix]]]) -> None:
        # A text several requests wait for is embedded once.
        unique = list(dict.fromkeys(text for texts, _ in batch for text in texts))
        try:
            matrix = np.asarray(self._embed(unique), dtype=np.float32)
            if matrix.ndim != 2 or len(matrix) != len(unique):
                raise PluginError(f"the embedder returned shape {matrix.shape} for {len(unique)} texts")
            row = {text: index for index, text in enumerate(unique)}
            answers = [matrix[[row[text] for text in texts]] for texts, _ in batch]
        except Exception as exc:
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
            else:  # whose texts made the model fail? Each request alone: only theirs fails.
                for entry in batch:
                    self._answer([entry])
            return
        except BaseException as exc:
            for _, request in batch:
                request.set_exception(exc)
            raise
        for (_, request), rows in zip(batch, answers, strict=True):
            request.set_result(rows)


_by_model: weakref.WeakKeyDictionary[object, BatchingWorker] = weakref.WeakKeyDictionary()
_by_model_lock = threading.Lock()


class _Model(Protocol):
    """What :func:`worker_of` needs of an embedder (:class:`~memcore.embedders.base.Embedder` has it)."""

    @property
    def name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Matrix: ...


def worker_of(model: _Model) -> BatchingWorker:
    """The one batching worker of an embedder that has none of its own (a third-party one), shared
    by everything that wraps it."""
    with _by_model_lock:
        worker = _by_model.get(model)
        if worker is None:
            worker = _by_model[model] = BatchingWorker(model.embed, f"embed-{model.name}")
        return worker


def _after_fork_in_child() -> None:
    """The parent's waiting requests belong to the parent's loop, and a flush it scheduled will
    never run here: start empty."""
    for worker in list(_workers):
        worker._lock = threading.Lock()
        worker._waiting = []
        worker._flush_scheduled = False


os.register_at_fork(after_in_child=_after_fork_in_child)
