"""What memcore needs from an embedding model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

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
