"""What memcore needs from an embedding model."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from memcore.embedders.batching import BatchingWorker
from memcore.telemetry import traced_embed
from memcore.validation import Matrix


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
    """Gives an embedder ``aembed``: its ``embed`` on a worker thread of the model's own, where
    requests that wait together are embedded in one call (:mod:`memcore.embedders.batching`).

    One thread per model: concurrent agents queue there, in one batch, instead of contending
    for the GIL and the model's threads. The built-in embedders and
    :func:`~memcore.embedders.cache.cached` (whatever it wraps) have it.
    """

    _worker: BatchingWorker | None = None
    _worker_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Each class's own embed and aembed get the GenAI embeddings span (memcore.telemetry).
        super().__init_subclass__(**kwargs)
        if "embed" in cls.__dict__:
            cls.embed = traced_embed(cls.__dict__["embed"])  # type: ignore[method-assign]
        if "aembed" in cls.__dict__:
            cls.aembed = traced_embed(cls.__dict__["aembed"])  # type: ignore[method-assign]

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed a batch of texts (see :class:`Embedder`)."""

    @traced_embed
    async def aembed(self, texts: Sequence[str]) -> Matrix:
        """:meth:`embed`, awaited: model inference off the event loop, batched with other callers'.

        :raises InvalidInputError: as :meth:`embed` does.
        """
        return await self._batching_worker().embed(texts)

    def _batching_worker(self) -> BatchingWorker:
        """The worker this embedder's model runs on."""
        with OffLoopEmbedding._worker_lock:
            if self._worker is None:
                self._worker = BatchingWorker(self.embed, f"embed-{type(self).__name__}")
            return self._worker
