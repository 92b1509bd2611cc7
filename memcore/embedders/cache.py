"""A content-hash cache in front of any embedder: identical text is embedded once.

Writes and recall queries repeat texts (a message is stored, then searched for,
then stored again by another agent); a real model spends milliseconds on each.
:class:`CachedEmbedder` keys vectors by the SHA-256 of the text's UTF-8 bytes,
sends only the texts it has not seen to the wrapped embedder, in one batch,
and forgets the least recently used vectors beyond ``max_entries``.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memcore.embedders.base import Embedder, OffLoopEmbedding
from memcore.embedders.batching import BatchingWorker, checked_texts, worker_of
from memcore.errors import InvalidInputError, PluginError
from memcore.validation import Matrix

DEFAULT_MAX_ENTRIES = 10_000
"""How many vectors a :class:`CachedEmbedder` keeps by default (about 15 MB of 384-dimensional ones)."""


@dataclass(frozen=True)
class CacheStats:
    """What a :class:`CachedEmbedder` has done so far.

    Every text passed to :meth:`CachedEmbedder.embed` counts once, as a hit or
    a miss, so ``hits + misses`` is the number of texts asked for.

    :param hits: texts answered without the wrapped embedder: found in the
        cache, or repeating an earlier text of the same call.
    :param misses: texts not found in the cache, each sent to the wrapped embedder (concurrent
        ``aembed`` calls missing one text each count it; the model's worker embeds it once).
    :param size: vectors held now.
    :param max_entries: the most vectors it holds.
    """

    hits: int
    misses: int
    size: int
    max_entries: int


def content_key(text: str) -> bytes:
    """The cache key of a text: the SHA-256 digest of its UTF-8 bytes.

    Lone surrogates, which strict UTF-8 cannot encode, are kept with
    ``surrogatepass`` so that every Python string has a key.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class CachedEmbedder(OffLoopEmbedding):
    """An embedder that embeds each distinct text once and remembers the vector.

    It has the wrapped embedder's :attr:`name` and :attr:`dim`, so stores
    treat the two as the same embedder. Safe to share between threads: lookups
    take a short lock, and sync calls to the wrapped embedder are made one at a
    time; a thread that needs a text another thread is embedding waits for that
    vector rather than embedding it again. :meth:`aembed` sends misses to the
    model's one worker thread, shared by every cache in front of that model
    (:mod:`memcore.embedders.batching`), which may run beside a sync call made on
    another thread: wrap an embedder that is not thread-safe in one cache, and
    use one of the two APIs with it.

    :param inner: the embedder to call on cache misses.
    :param max_entries: how many vectors to keep; the least recently used go first.
    :raises InvalidInputError: if ``max_entries`` is not a positive integer.
    """

    def __init__(self, inner: Embedder, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidInputError(f"max_entries must be a positive integer, got {max_entries!r}")
        self._inner = inner
        self._max_entries = max_entries
        self._vectors: OrderedDict[bytes, Matrix] = OrderedDict()
        self._hits = 0
        self._misses = 0
        # _lock guards the dictionary and counters; _embed_lock serialises calls to the inner embedder.
        self._lock = threading.Lock()
        self._embed_lock = threading.Lock()

    @property
    def inner(self) -> Embedder:
        """The wrapped embedder."""
        return self._inner

    @property
    def name(self) -> str:
        """The wrapped embedder's name."""
        return self._inner.name

    @property
    def dim(self) -> int:
        """The wrapped embedder's dimension."""
        return self._inner.dim

    @property
    def max_entries(self) -> int:
        """The most vectors the cache holds."""
        return self._max_entries

    async def aembed(self, texts: Sequence[str]) -> Matrix:
        """:meth:`embed`, awaited. Cached texts are answered at once (a recall query never queues
        behind other agents' writes); the others go to the model's worker, in one call with
        whatever else waits there."""
        keys = _keys(texts)
        found: dict[bytes, Matrix] = {}
        missing = self._lookup(keys, texts, found)
        if missing:
            self._keep(missing, await self._batching_worker().embed(list(missing.values())), found)
        return self._assembled(keys, found, len(missing))

    def _batching_worker(self) -> BatchingWorker:
        # Every cache in front of one model shares the model's worker: memories each wrap the
        # embedder they are given, and sixty-four of them must make one batch, not sixty-four.
        if isinstance(self._inner, OffLoopEmbedding):
            return self._inner._batching_worker()
        return worker_of(self._inner)

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed texts, calling the wrapped embedder at most once, for the texts not cached.

        Repeats within ``texts`` are embedded once.

        :param texts: the texts to embed (a list, not a bare string).
        :returns: a new float32 array of shape ``(len(texts), dim)``, one row per text,
            equal to what the wrapped embedder returns for them.
        :raises InvalidInputError: if ``texts`` is a string or holds a non-string.
        :raises PluginError: if the wrapped embedder returns an array of the wrong shape.
        """
        keys = _keys(texts)
        found: dict[bytes, Matrix] = {}
        missing = self._lookup(keys, texts, found)
        if missing:
            with self._embed_lock:
                # Another thread may have embedded some of them while this one waited.
                missing = self._lookup(list(missing), list(missing.values()), found)
                if missing:
                    self._keep(missing, self._inner.embed(list(missing.values())), found)
        return self._assembled(keys, found, len(missing))

    def _assembled(self, keys: list[bytes], found: dict[bytes, Matrix], misses: int) -> Matrix:
        matrix = np.empty((len(keys), self.dim), dtype=np.float32)
        for row, key in enumerate(keys):
            matrix[row] = found[key]
        with self._lock:
            self._misses += misses
            self._hits += len(keys) - misses
        return matrix

    def _lookup(
        self, keys: list[bytes], texts: Sequence[str], found: dict[bytes, Matrix]
    ) -> dict[bytes, str]:
        """Copy the cached vectors of ``keys`` into ``found``; return the others' texts, deduplicated."""
        missing: dict[bytes, str] = {}
        with self._lock:
            for key, text in zip(keys, texts, strict=True):
                vector = self._vectors.get(key)
                if vector is None:
                    missing[key] = text
                else:
                    self._vectors.move_to_end(key)
                    found[key] = vector
        return missing

    def _keep(self, missing: dict[bytes, str], embedded: Matrix, found: dict[bytes, Matrix]) -> None:
        vectors = np.asarray(embedded, dtype=np.float32)
        if vectors.shape != (len(missing), self.dim):
            raise PluginError(
                f"the embedder {self.name!r} returned an array of shape {vectors.shape} for "
                f"{len(missing)} texts; expected ({len(missing)}, {self.dim})"
            )
        with self._lock:
            for key, vector in zip(missing, vectors, strict=True):
                # A read-only copy: the caller's matrix and the cache never share memory.
                stored = vector.copy()
                stored.flags.writeable = False
                found[key] = stored
                self._vectors[key] = stored
                self._vectors.move_to_end(key)
            while len(self._vectors) > self._max_entries:
                self._vectors.popitem(last=False)

    def stats(self) -> CacheStats:
        """The hit and miss counts since creation, and the cache's current size."""
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._vectors), self._max_entries)

    def __repr__(self) -> str:
        return f"CachedEmbedder({self._inner!r}, max_entries={self._max_entries})"


def _keys(texts: Sequence[str]) -> list[bytes]:
    return [content_key(text) for text in checked_texts(texts)]


def cached(embedder: Embedder) -> CachedEmbedder:
    """``embedder`` behind a :class:`CachedEmbedder` with the default size, never wrapped twice.

    :param embedder: any embedder; a :class:`CachedEmbedder` is returned unchanged.
    :returns: the cached embedder.
    """
    if isinstance(embedder, CachedEmbedder):
        return embedder
    return CachedEmbedder(embedder)
