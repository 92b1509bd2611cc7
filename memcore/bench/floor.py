"""The floor: exact top-k with numpy over rows already gathered per scope, as fast as search gets."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memcore.stores.blas_threads import single_blas_thread
from memcore.validation import Matrix


class ExactFloor:
    """Exact cosine top-k over a fixed subset of a dataset's unit vectors.

    :param vectors: all stored unit vectors.
    :param rows: the rows a query may see (gathered once, contiguous, like a per-scope partition).
    """

    def __init__(self, vectors: Matrix, rows: npt.NDArray[np.intp]) -> None:
        self.rows = rows
        self.vectors = np.ascontiguousarray(vectors[rows])

    def top(self, query: Matrix, k: int) -> npt.NDArray[np.intp]:
        """The dataset rows of the ``k`` best matches, best first."""
        with single_blas_thread():
            scores = self.vectors @ query
        k = min(k, len(scores))
        best = np.argpartition(-scores, k - 1)[:k]
        return self.rows[best[np.argsort(-scores[best])]]
