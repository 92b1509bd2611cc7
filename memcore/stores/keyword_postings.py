"""An inverted index of one partition's keyword terms, so BM25 reads postings instead of every record.

For each term (:func:`memcore.keywords.terms`) it keeps the rows that contain it and how
often; for each row, how many terms it has. A partition keeps it up to date from its first
record on, so no recall pays for building it (a partition loaded in bulk from a snapshot
builds it in the background, or at its first keyword search). Scores are computed over the
rows of the reading scope only (:meth:`ScopedIndex.keyword_search`), exactly as
:func:`memcore.keywords.bm25_scores` computes them.
"""

from __future__ import annotations

from array import array
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from memcore.keywords import term_counts_unmemoised as term_counts

_COUNT_BITS = 20
_COUNT_MASK = (1 << _COUNT_BITS) - 1
"""A term's count in one record fits: a record is at most 1 MiB, and each occurrence takes two bytes."""

Entries: TypeAlias = "int | array[int]"
"""A term's postings, each ``row << 20 | count``: one int while one row holds the term (most terms
of a store are that rare), else an ``array("q")`` of them in no order (8 bytes each, where a dict
of row -> count cost ~60)."""


class Postings:
    """Term -> the rows holding it and how often, and each row's term count."""

    def __init__(self) -> None:
        self.rows: dict[str, Entries] = {}
        self.lengths: npt.NDArray[np.int32] = np.zeros(16, dtype=np.int32)

    def entries(self, term: str) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]] | None:
        """The rows holding ``term`` and how often each does, or ``None`` when none does."""
        found = self.rows.get(term)
        if found is None:
            return None
        if isinstance(found, int):
            return np.array([found >> _COUNT_BITS], dtype=np.intp), np.array([found & _COUNT_MASK])
        packed = np.array(found, dtype=np.int64)  # a copy: the array may grow while these are used
        return (packed >> _COUNT_BITS).astype(np.intp), packed & _COUNT_MASK

    def add(self, row: int, text: str) -> None:
        """Index ``text`` as the content of ``row`` (which holds nothing indexed)."""
        counts, length = term_counts(text)
        if row >= len(self.lengths):
            self.lengths = np.resize(self.lengths, max(2 * len(self.lengths), row + 1))
        self.lengths[row] = length
        for term, count in counts.items():
            entry = row << _COUNT_BITS | count
            found = self.rows.get(term)
            if found is None:
                self.rows[term] = entry
            elif isinstance(found, int):
                self.rows[term] = array("q", (found, entry))
            else:
                found.append(entry)

    def discard(self, row: int, text: str) -> None:
        """Forget ``row``, whose indexed content is ``text``."""
        for term, count in term_counts(text)[0].items():
            entry = row << _COUNT_BITS | count
            found = self.rows[term]
            if isinstance(found, int):
                del self.rows[term]
                continue
            last = found.pop()
            if last != entry:
                found[_position(found, entry)] = last
            if len(found) == 1:
                self.rows[term] = found[0]
        self.lengths[row] = 0

    def move(self, source: int, target: int, text: str) -> None:
        """Renumber ``source`` (whose content is ``text``) as ``target``, a row that holds nothing."""
        for term, count in term_counts(text)[0].items():
            entry = target << _COUNT_BITS | count
            found = self.rows[term]
            if isinstance(found, int):
                self.rows[term] = entry
            else:
                found[_position(found, source << _COUNT_BITS | count)] = entry
        self.lengths[target] = self.lengths[source]
        self.lengths[source] = 0


def _position(entries: array[int], entry: int) -> int:
    """Where ``entry`` is in ``entries`` (it is there)."""
    if len(entries) <= _SCANNED_IN_PYTHON:
        return entries.index(entry)
    return int(np.flatnonzero(np.frombuffer(entries, dtype=np.int64) == entry)[0])


_SCANNED_IN_PYTHON = 32
"""Up to this many postings, a term's are searched without numpy (whose call costs more)."""
