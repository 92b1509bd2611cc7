"""``hash``: a deterministic, dependency-free embedder for tests and demos.

Feature hashing ("the hashing trick"): every lowercase word of the text, and
every character trigram of those words, is hashed with BLAKE2b into one of
``dim`` buckets with a sign taken from the same hash; the bucket sums are
scaled to unit length. Texts sharing words (or word fragments) get a positive
cosine similarity; nothing is learned, so it knows no synonyms.

BLAKE2b rather than Python's ``hash()``, which is salted per process: the same
text must give the same vector in every process, or a durable store written by
one process could not be searched from another.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from memcore.embedders.base import OffLoopEmbedding
from memcore.embedders.batching import checked_texts
from memcore.errors import InvalidInputError
from memcore.validation import Matrix

MAX_DIM = 65_536
"""The largest dimension :class:`HashEmbedder` accepts."""

WORD_WEIGHT = 1.0
"""The weight of a whole-word feature."""

TRIGRAM_WEIGHT = 0.5
"""The weight of a character-trigram feature; lower, so whole words dominate."""

_WORD = re.compile(r"\w+")
# Gives texts without a single word (``""``, ``"?!"``) a fixed direction, since
# an all-zero vector has no cosine similarity to anything.
_EMPTY_TEXT_FEATURE = "\x00empty"
_SIGN_BIT = 1 << 63


@functools.lru_cache(maxsize=1 << 16)
def _feature_hash(feature: str) -> int:
    digest = hashlib.blake2b(
        feature.encode("utf-8", "surrogatepass"), digest_size=8, person=b"memcore-hash-v1"
    ).digest()
    return int.from_bytes(digest, "little")


def _features(text: str) -> list[tuple[str, float]]:
    features: list[tuple[str, float]] = []
    for word in _WORD.findall(text.casefold()):
        features.append(("w:" + word, WORD_WEIGHT))
        padded = f"<{word}>"
        features.extend(("c:" + padded[i : i + 3], TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
    return features


class HashEmbedder(OffLoopEmbedding):
    """Feature-hashing embedder: deterministic across processes, no model to load.

    :param dim: the vector length, from 1 to :data:`MAX_DIM`.
    :raises InvalidInputError: if ``dim`` is out of range.
    """

    name: ClassVar[str] = "hash"

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
            raise InvalidInputError(
                f"the hash embedder's dim must be an integer from 1 to {MAX_DIM}, got {dim!r}"
            )
        self._dim = dim

    @property
    def dim(self) -> int:
        """The length of every vector :meth:`embed` returns."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed texts into unit-length rows; identical texts give identical rows.

        :param texts: the texts to embed (a list, not a bare string).
        :returns: a float32 array of shape ``(len(texts), dim)``; no row is all zeros.
        :raises InvalidInputError: if ``texts`` is a string or holds a non-string.
        """
        texts = checked_texts(texts)
        matrix = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            matrix[row] = self._embed_one(text)
        return matrix

    def _embed_one(self, text: str) -> Matrix:
        features = _features(text)
        vector = self._accumulate(features)
        if not vector.any():
            # Also reached when every feature's signed contribution cancels out.
            vector = self._accumulate([(_EMPTY_TEXT_FEATURE, WORD_WEIGHT)])
        return (vector / np.linalg.norm(vector)).astype(np.float32)

    def _accumulate(self, features: list[tuple[str, float]]) -> npt.NDArray[np.float64]:
        hashes = [_feature_hash(feature) for feature, _ in features]
        buckets = np.fromiter(
            ((h & ~_SIGN_BIT) % self._dim for h in hashes), dtype=np.intp, count=len(hashes)
        )
        weights = np.fromiter(
            (weight if h & _SIGN_BIT else -weight for h, (_, weight) in zip(hashes, features, strict=True)),
            dtype=np.float64,
            count=len(hashes),
        )
        return np.bincount(buckets, weights=weights, minlength=self._dim).astype(np.float64, copy=False)

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self._dim})"
