"""What memcore needs from an embedding model."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Protocol, runtime_checkable

from memcore.validation import Matrix
from memcore.workers import WorkerPool


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors for :meth:`memcore.store.Store.search`.

    Plugins provide embedders through the ``memcore_register_embedders`` hook;
    callers get one with :func:`memcore.open_embedder`.
    """

    @property
    def name(self) -> str:
        """The name the embedder is registered under, such as ``"hash"``."""
        ...

    @property
    def dim(self) -> int:
        """The length of every vector :meth:`embed` returns."""
        ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed a batch of texts.

        :param texts: the texts, in order (a list, never a bare string).
        :returns: a float32 array of shape ``(len(texts), dim)``, one row per text.
        """
        ...


class OffLoopEmbedding(ABC):
    """Gives an embedder ``aembed``: its ``embed`` on a worker thread of the embedder's own.

    One thread: a model embeds one batch at a time (using every core inside the batch), so
    concurrent agents queue there instead of contending for the GIL. The built-in embedders
    and :func:`~memcore.embedders.cache.cached` (whatever it wraps) have it.
    """

    _pool: WorkerPool | None = None
    _pool_lock: ClassVar[threading.Lock] = threading.Lock()

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed a batch of texts (see :class:`Embedder`)."""

    async def aembed(self, texts: Sequence[str]) -> Matrix:
        """:meth:`embed`, awaited: model inference off the event loop."""
        with OffLoopEmbedding._pool_lock:
            if self._pool is None:
                self._pool = WorkerPool(1, f"embed-{type(self).__name__}")
        return await self._pool.run(self.embed, texts)
