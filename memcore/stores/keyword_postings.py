"""An inverted index of one partition's keyword terms, so BM25 reads postings instead of every record.

For each term (:func:`memcore.keywords.terms`) it keeps the rows that contain it and how
often; for each row, how many terms it has. A partition builds it the first time a
keyword search reaches it and keeps it up to date from then on (a store that is never
searched by keywords pays nothing for it). Scores are computed over the rows of the
reading scope only (:meth:`ScopedIndex.keyword_search`), exactly as
:func:`memcore.keywords.bm25_scores` computes them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memcore.keywords import term_counts


class Postings:
    """Term -> {row: count} for one partition's records, and each row's term count."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, int]] = {}
        self.lengths: npt.NDArray[np.int32] = np.zeros(16, dtype=np.int32)

    def add(self, row: int, text: str) -> None:
        """Index ``text`` as the content of ``row`` (which holds nothing indexed)."""
        counts, length = term_counts(text)
        if row >= len(self.lengths):
            self.lengths = np.resize(self.lengths, max(2 * len(self.lengths), row + 1))
        self.lengths[row] = length
        for term, count in counts.items():
            self.rows.setdefault(term, {})[row] = count

    def discard(self, row: int, text: str) -> None:
        """Forget ``row``, whose indexed content is ``text``."""
        for term in term_counts(text)[0]:
            rows = self.rows[term]
            del rows[row]
            if not rows:
                del self.rows[term]
        self.lengths[row] = 0

    def move(self, source: int, target: int, text: str) -> None:
        """Renumber ``source`` (whose content is ``text``) as ``target``, a row that holds nothing."""
        for term in term_counts(text)[0]:
            rows = self.rows[term]
            rows[target] = rows.pop(source)
        self.lengths[target] = self.lengths[source]
        self.lengths[source] = 0
