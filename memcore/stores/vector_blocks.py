"""A partition's vectors as a growing float32 matrix kept in fixed-size blocks.

One contiguous matrix would have to double (and copy itself) to grow: at a
million records that is up to twice the vectors' bytes allocated, and three
times while the copy runs. Here the first block doubles up to :data:`BLOCK_ROWS`
rows, then whole blocks are added, so no more than one block is ever spare and
nothing is copied. Products and gathers run block by block.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memcore.validation import Matrix

BLOCK_SHIFT = 10
BLOCK_ROWS = 1 << BLOCK_SHIFT
"""Rows per block (1.5 MB at 384 dimensions): small enough that the spare capacity stays small,
large enough that a product over a block costs far more than the Python around it."""
_INITIAL_ROWS = 16


class VectorBlocks:
    """Rows of ``dimension`` float32 values, row ``i`` at block ``i >> BLOCK_SHIFT``."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.blocks: list[Matrix] = [np.zeros((_INITIAL_ROWS, dimension), dtype=np.float32)]
        self.capacity = _INITIAL_ROWS

    def reserve(self, needed: int) -> None:
        """Make room for rows ``0 .. needed - 1`` (new rows are zero)."""
        if needed <= self.capacity:
            return
        first = self.blocks[0]
        if needed > len(first) and len(first) < BLOCK_ROWS:
            rows = len(first)
            while rows < min(needed, BLOCK_ROWS):
                rows *= 2
            grown = np.zeros((rows, self.dimension), dtype=np.float32)
            grown[: len(first)] = first
            self.blocks[0] = grown
            self.capacity = rows
        while self.capacity < needed:
            self.blocks.append(np.zeros((BLOCK_ROWS, self.dimension), dtype=np.float32))
            self.capacity += BLOCK_ROWS

    def row(self, row: int) -> Matrix:
        """Row ``row`` (a view)."""
        vector: Matrix = self.blocks[row >> BLOCK_SHIFT][row & (BLOCK_ROWS - 1)]
        return vector

    def set(self, row: int, vector: Matrix | None) -> None:
        """Store ``vector`` (zeros for ``None``) as row ``row``."""
        self.blocks[row >> BLOCK_SHIFT][row & (BLOCK_ROWS - 1)] = 0.0 if vector is None else vector

    def set_rows(self, start: int, matrix: Matrix) -> None:
        """Store the rows of ``matrix`` as rows ``start, start + 1, ...`` (reserved already)."""
        done = 0
        while done < len(matrix):
            row = start + done
            block, offset = self.blocks[row >> BLOCK_SHIFT], row & (BLOCK_ROWS - 1)
            count = min(len(block) - offset, len(matrix) - done)
            block[offset : offset + count] = matrix[done : done + count]
            done += count

    def move(self, source: int, target: int) -> None:
        """Copy row ``source`` over row ``target`` and zero ``source``."""
        self.set(target, self.row(source))
        self.set(source, None)

    def take(self, rows: npt.NDArray[np.intp]) -> Matrix:
        """The rows ``rows``, gathered into one new matrix."""
        if len(self.blocks) == 1:
            gathered: Matrix = self.blocks[0][rows]
            return gathered
        gathered = np.empty((len(rows), self.dimension), dtype=np.float32)
        blocks = rows >> BLOCK_SHIFT
        offsets = rows & (BLOCK_ROWS - 1)
        for number in np.unique(blocks).tolist():
            chosen = blocks == number
            gathered[chosen] = self.blocks[number][offsets[chosen]]
        return gathered

    def products(self, query: Matrix, size: int) -> npt.NDArray[np.float32]:
        """``row @ query`` for rows ``0 .. size - 1``."""
        if len(self.blocks) == 1:
            return self.blocks[0][:size] @ query
        parts = []
        for number, block in enumerate(self.blocks):
            start = number << BLOCK_SHIFT
            if start >= size:
                break
            parts.append(block[: size - start] @ query)
        return np.concatenate(parts)
