"""Keyword (BM25) search done by Qdrant: each point carries its terms as a sparse vector.

A point's ``keywords`` sparse vector has one dimension per term of its content
(:func:`memcore.keywords.terms`, a stable 32-bit hash of the stem), weighted by
BM25's saturated, length-normalised term frequency. A query's sparse vector gives
each of its terms that term's inverse document frequency *over the reading scope*,
from exact counts on the ``terms`` payload index, so Qdrant's dot product is the
BM25 score, and one tenant's words never move another's ranking (Qdrant's own IDF
modifier would count the whole collection).

The difference from the exact scan (:func:`memcore.keywords.bm25_scores`): BM25
normalises a document's length by the average length of the scope, which Qdrant
cannot aggregate; here it is the fixed :data:`AVERAGE_TERMS`, fixed when a point is
written. That changes how fast a repeated term saturates, so scores differ from the
scan's and, between documents that match different terms, so can their order.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import Final

from memcore.keywords import term_counts, term_score

KEYWORD_VECTOR: Final = "keywords"
"""The sparse named vector holding a point's BM25 term weights."""

AVERAGE_TERMS: Final = 10.0
"""The document length BM25 normalises by: about a chat turn's terms once stop words are gone."""

SparseVector = tuple[list[int], list[float]]
"""Indices and values."""


@functools.lru_cache(maxsize=65_536)
def term_id(term: str) -> int:
    """The sparse dimension of a term: a stable 32-bit hash (Python's ``hash`` changes per process).

    Memoised: a vocabulary repeats, and every point written hashes each of its terms."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "little")


def _sparse(weights: Mapping[int, float]) -> SparseVector:
    ordered = sorted(weights.items())
    return [index for index, _ in ordered], [value for _, value in ordered]


def document_vector(text: str) -> SparseVector:
    """The ``keywords`` vector of a point whose content is ``text``."""
    counts, length = term_counts(text)
    weights: dict[int, float] = {}
    for term, count in counts.items():
        index = term_id(term)  # two terms sharing a hash share a dimension: their weights add
        weights[index] = weights.get(index, 0.0) + term_score(1.0, count, length, AVERAGE_TERMS)
    return _sparse(weights)


def query_vector(weights: Mapping[str, float]) -> SparseVector:
    """The query vector giving each term its weight (its idf in the reading scope)."""
    by_index: dict[int, float] = {}
    for term, weight in weights.items():
        index = term_id(term)
        by_index[index] = by_index.get(index, 0.0) + weight
    return _sparse(by_index)


def distinct_terms(text: str) -> list[str]:
    """Each term of ``text`` once: a point's ``terms`` payload, counted for document frequencies."""
    return sorted(term_counts(text)[0])
