"""An inverted index of one partition's keyword terms, so BM25 reads postings instead of every record.

For each term (:func:`memcore.keywords.terms`) it keeps the rows that contain it and how
often; for each row, how many terms it has. A partition keeps it up to date from its first
record on, so no recall pays for building it (a partition loaded in bulk from a snapshot
builds it in the background, or at its first keyword search). Scores are computed over the
rows of the reading scope only (:meth:`ScopedIndex.keyword_search`), exactly as
:func:`memcore.keywords.bm25_scores` computes them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memcore.keywords import term_counts_unmemoised as term_counts

_COUNT_BITS = 20
_COUNT_MASK = (1 << _COUNT_BITS) - 1

Entries = int | dict[int, int]
"""A term's postings: ``row << 20 | count`` while one row holds it (most terms of a store are that
rare, and one int costs a tenth of a dict), else a dict of row -> count."""


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
        rows = np.fromiter(found.keys(), dtype=np.intp, count=len(found))
        counts = np.fromiter(found.values(), dtype=np.int64, count=len(found))
        return rows, counts

    def add(self, row: int, text: str) -> None:
        """Index ``text`` as the content of ``row`` (which holds nothing indexed)."""
        counts, length = term_counts(text)
        if row >= len(self.lengths):
            self.lengths = np.resize(self.lengths, max(2 * len(self.lengths), row + 1))
        self.lengths[row] = length
        for term, count in counts.items():
            self._set(term, row, count)

    def _set(self, term: str, row: int, count: int) -> None:
        found = self.rows.get(term)
        if found is None and count <= _COUNT_MASK:
            self.rows[term] = row << _COUNT_BITS | count
        elif isinstance(found, dict):
            found[row] = count
        else:
            entries = {} if found is None else {found >> _COUNT_BITS: found & _COUNT_MASK}
            entries[row] = count
            self.rows[term] = entries

    def _pop(self, term: str, row: int) -> int:
        """Forget that ``row`` holds ``term``; how often it did."""
        found = self.rows[term]
        if isinstance(found, int):
            del self.rows[term]
            return found & _COUNT_MASK
        count = found.pop(row)
        if len(found) == 1:
            ((other, other_count),) = found.items()
            if other_count <= _COUNT_MASK:
                self.rows[term] = other << _COUNT_BITS | other_count
        return count

    def discard(self, row: int, text: str) -> None:
        """Forget ``row``, whose indexed content is ``text``."""
        for term in term_counts(text)[0]:
            self._pop(term, row)
        self.lengths[row] = 0

    def move(self, source: int, target: int, text: str) -> None:
        """Renumber ``source`` (whose content is ``text``) as ``target``, a row that holds nothing."""
        for term in term_counts(text)[0]:
            self._set(term, target, self._pop(term, source))
        self.lengths[target] = self.lengths[source]
        self.lengths[source] = 0
