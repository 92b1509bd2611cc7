"""Keyword ranking: BM25 over the records a scope can see.

Text is split into lowercase word tokens; a possessive or contracted ending is cut
("Caroline's" is "caroline"), English stop words are dropped (in queries they only
add noise: "what", "did", "the"), and each word is reduced to its Snowball (Porter2)
stem, so that "painting" finds "painted" and "adoption" finds "adopted". Statistics
(document frequencies, average length) are those of the records being ranked, that is
of the reading scope: one tenant's words never change another's ranking.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import snowballstemmer  # type: ignore[import-untyped]  # the package ships no type hints

K1 = 1.2
"""BM25 term-frequency saturation."""
B = 0.75
"""BM25 length normalisation."""

_STOP_WORDS_TEXT = """
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves s t don ll m re ve d o y ever also yes oh really
"""

STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
"""Words too common to say anything about a record (English)."""

_WORD = re.compile(r"\w+(?:'\w+)?")
_MEMOISED_CHARS = 2_048
_stemmer = snowballstemmer.stemmer("english")
_stemmer_lock = threading.Lock()


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """Each word is stemmed once: the stemmer is pure Python, and a conversation repeats its words.

    The stemmer keeps its working state on itself, so two threads stemming at once corrupt
    each other's words (and the cache would keep the wrong stems): one at a time.
    """
    with _stemmer_lock:
        stem: str = _stemmer.stemWord(word)
    return stem


def terms(text: str) -> list[str]:
    """The BM25 terms of ``text``: normalised word tokens, stop words left out."""
    if len(text) > _MEMOISED_CHARS:
        return list(_terms.__wrapped__(text))
    return list(_terms(text))


@functools.lru_cache(maxsize=32_768)
def _terms(text: str) -> tuple[str, ...]:
    found = []
    for word in _WORD.findall(text.casefold()):
        word = word.split("'", 1)[0]  # caroline's -> caroline, don't -> don
        if word.isdigit() and word.isascii():
            found.append(word)  # a number stems to itself: ids and dates would only fill _stem's memo
        elif word not in STOP_WORDS:
            found.append(_stem(word))
    return tuple(found)


def term_counts(text: str) -> tuple[Mapping[str, int], int]:
    """How often each term occurs in ``text``, and how many terms it has (memoised like :func:`terms`)."""
    if len(text) > _MEMOISED_CHARS:
        return _counted.__wrapped__(text)
    return _counted(text)


def term_counts_unmemoised(text: str) -> tuple[Mapping[str, int], int]:
    """:func:`term_counts` without filling its memo: for a text counted once, as an index does
    when it stores a record (the memo would only hold a copy of every text indexed)."""
    found = _terms.__wrapped__(text)
    return Counter(found), len(found)


@functools.lru_cache(maxsize=32_768)
def _counted(text: str) -> tuple[Mapping[str, int], int]:
    found = terms(text)
    return MappingProxyType(Counter(found)), len(found)


def idf(documents: int, containing: int) -> float:
    """BM25's inverse document frequency of a term found in ``containing`` of ``documents``."""
    return math.log(1 + (documents - containing + 0.5) / (containing + 0.5))


def term_score(weight: float, tf: int, length: int, average: float) -> float:
    """One term's share of a document's BM25 score: its ``weight`` (idf), saturated and length-normalised."""
    return weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))


def bm25_scores(query: str, documents: Sequence[str]) -> list[float]:
    """The BM25 score of each document for ``query``, over the statistics of ``documents``.

    A document sharing no term with the query scores 0. The exact reference: the
    built-in stores answer from an inverted index that gives the same scores.
    """
    wanted = set(terms(query))
    if not wanted or not documents:
        return [0.0] * len(documents)
    counted, lengths = zip(*map(term_counts, documents), strict=True)
    average = sum(lengths) / len(lengths) or 1.0
    frequency = Counter(term for counts in counted for term in wanted & counts.keys())
    weights = {term: idf(len(documents), seen) for term, seen in frequency.items()}
    scores = []
    for counts, length in zip(counted, lengths, strict=True):
        score = 0.0
        for term, weight in weights.items():
            tf = counts.get(term, 0)
            if tf:
                score += term_score(weight, tf, length, average)
        scores.append(score)
    return scores
