"""A partition's vectors as a growing float32 matrix kept in fixed-size blocks.

One contiguous matrix would have to double (and copy itself) to grow: at a
million records that is up to twice the vectors' bytes allocated, and three
times while the copy runs. Here the first block doubles up to :data:`BLOCK_ROWS`
rows, then whole blocks are added, so no more than one block is ever spare and
nothing is copied. Products and gathers run block by block.

A partition's whole blocks come from its index's :class:`BlockPool`, cut from slabs of
several blocks, so that the kernel can back them with huge pages.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref

import numpy as np
import numpy.typing as npt

from memcore.validation import Matrix

BLOCK_SHIFT = 10
BLOCK_ROWS = 1 << BLOCK_SHIFT
"""Rows per block (1.5 MB at 384 dimensions): small enough that the spare capacity stays small,
large enough that a product over a block costs far more than the Python around it."""
_INITIAL_ROWS = 16
SLAB_BLOCKS = 8
"""Whole blocks per slab of a :class:`BlockPool` (12 MB at 384 dimensions)."""
_HUGE_PAGE = 2 << 20
"""A transparent huge page on x86-64 (and arm64 with 4 KiB pages)."""
MAPPED_BYTES = 64 << 10
"""A growing first block from this size is a mapping of its own (see :meth:`BlockPool.first_block`)."""
MAPPED_BLOCKS_KEPT = 4096
"""At most this many first blocks of the whole process are mappings at once: far under the
65,530 mappings Linux allows a process, which threads and libraries need too."""
_PRIVATE_MAPPINGS = hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS")


class _MappingCount:
    """How many mapped first blocks are alive in this process, across every pool and store."""

    def __init__(self) -> None:
        self._new_lock()
        self.alive = 0

    def _new_lock(self) -> None:
        # Reentrant: a collection that frees a mapping (its finalizer drops one) may run anywhere.
        # Made anew in a forked child, where a thread of the parent may have held it.
        self._lock = threading.RLock()

    def claim(self) -> bool:
        """Count one more, unless :data:`MAPPED_BLOCKS_KEPT` are alive."""
        with self._lock:
            if self.alive >= MAPPED_BLOCKS_KEPT:
                return False
            self.alive += 1
            return True

    def drop(self) -> None:
        with self._lock:
            self.alive -= 1


_MAPPINGS = _MappingCount()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_MAPPINGS._new_lock)


def mapped_blocks() -> int:
    """How many first blocks of this process are mappings of their own, now."""
    return _MAPPINGS.alive


def _mapped_block(rows: int, dimension: int) -> Matrix | None:
    """A zeroed block in an anonymous private mapping of its own, counted until its memory is
    freed (however its partition or pool ends); ``None`` past the count or if mapping fails."""
    if not (_PRIVATE_MAPPINGS and _MAPPINGS.claim()):
        return None
    try:
        memory = mmap.mmap(-1, rows * dimension * 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError:  # out of mappings or address space: the heap may still have room
        _MAPPINGS.drop()
        return None
    block: Matrix = np.frombuffer(memory, dtype=np.float32).reshape(rows, dimension)
    weakref.finalize(block.base, _MAPPINGS.drop)
    return block


class BlockPool:
    """Whole blocks of one width for the partitions of one index, cut from slabs of
    :data:`SLAB_BLOCKS` blocks, each block handed out zeroed.

    numpy asks the kernel for transparent huge pages for an array of 4 MB or more (Linux's
    ``madvise`` mode, the common default), never for a 1.5 MB block on its own. A search streams
    through every row of its blocks, and once they are out of the CPU's caches a product on 4 KB
    pages waits on address translation too: at 1,000,000 records (100 owners), a search over an
    agent's 100,000 took 16.5-16.8 ms over separate blocks and 12.6-13.0 ms with all but each
    owner's first block in slabs, one over the whole tenant 153-162 and 121-123 ms
    (``benchmarks/memory_block_slabs.py``, two pairs of runs).

    A block given back (its partition emptied) is handed out again, and a slab all of whose
    blocks are back is let go, so that erasing owners returns their memory (the slabs are 12 MB
    allocations of their own, which the allocator hands back to the system when freed).

    The pool also gives each partition its first block as it doubles (:meth:`first_block`).
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._free: list[Matrix] = []
        self._in_use: dict[int, int] = {}
        """The id of each slab's memory (a block's ``base``), with how many of its blocks are out."""

    @property
    def free(self) -> int:
        """How many blocks are cut and not in use."""
        return len(self._free)

    @property
    def slabs(self) -> int:
        """How many slabs the pool holds."""
        return len(self._in_use)

    def take(self) -> Matrix:
        """A zeroed block of :data:`BLOCK_ROWS` rows."""
        if not self._free:
            slab = _huge_page_aligned(SLAB_BLOCKS * BLOCK_ROWS, self.dimension)
            # Handed out from the slab's start: a slab only partly used leaves its end untouched.
            self._free = [
                slab[at : at + BLOCK_ROWS] for at in range((SLAB_BLOCKS - 1) * BLOCK_ROWS, -1, -BLOCK_ROWS)
            ]
            self._in_use[id(slab.base)] = 0
        block = self._free.pop()
        self._in_use[id(block.base)] += 1
        return block

    def first_block(self, rows: int) -> Matrix:
        """A zeroed first block of ``rows`` rows (a power of two up to :data:`BLOCK_ROWS`).

        At :data:`BLOCK_ROWS` it is a whole block from a slab. From :data:`MAPPED_BYTES` below
        that it is an anonymous private mapping of its own, which the kernel takes back as soon
        as the block is outgrown: from the heap, the smaller blocks a growing store leaves behind
        stay resident as holes that later allocations only partly fill (loading 100,000 records
        over 100 owners, whose first blocks all move into slabs, kept 19 MiB more that way).
        Smaller blocks, and any past :data:`MAPPED_BLOCKS_KEPT` mappings, come from the heap.
        """
        if rows >= BLOCK_ROWS:
            return self.take()
        mapped = _mapped_block(rows, self.dimension) if rows * self.dimension * 4 >= MAPPED_BYTES else None
        return np.zeros((rows, self.dimension), dtype=np.float32) if mapped is None else mapped

    def give_back(self, block: Matrix) -> None:
        """Return a block :meth:`take` or :meth:`first_block` gave, no longer read or written by
        its partition."""
        memory = block.base
        if memory is None or id(memory) not in self._in_use:
            return  # from the heap, or a mapping: freed (unmapped) with the last reference to it
        self._in_use[id(memory)] -= 1
        if self._in_use[id(memory)]:
            block.fill(0.0)
            self._free.append(block)
            return
        del self._in_use[id(memory)]
        self._free = [free for free in self._free if free.base is not memory]


def _huge_page_aligned(rows: int, dimension: int) -> Matrix:
    """A zeroed float32 matrix starting on a 2 MiB boundary, so that every huge page of its span
    lies inside it (one that merely started on a 4 KiB page lost one huge page of six)."""
    size = rows * dimension * 4
    memory = np.zeros(size + _HUGE_PAGE, dtype=np.uint8)
    start = -memory.ctypes.data % _HUGE_PAGE
    aligned: Matrix = memory[start : start + size].view(np.float32).reshape(rows, dimension)
    return aligned


class VectorBlocks:
    """Rows of ``dimension`` float32 values, row ``i`` at block ``i >> BLOCK_SHIFT``.

    :param pool: where the blocks come from, the first as it doubles too (``None``: each
        allocated on its own); give them back with :meth:`release` when the rows are no longer
        needed.
    """

    def __init__(self, dimension: int, pool: BlockPool | None = None) -> None:
        self.dimension = dimension
        self.blocks: list[Matrix] = [np.zeros((_INITIAL_ROWS, dimension), dtype=np.float32)]
        self.capacity = _INITIAL_ROWS
        self._pool = pool

    def _whole_block(self) -> Matrix:
        if self._pool is None:
            return np.zeros((BLOCK_ROWS, self.dimension), dtype=np.float32)
        return self._pool.take()

    def release(self) -> None:
        """Give the blocks back to the pool: every row is gone (the capacity is as new)."""
        if self._pool is not None:
            for block in self.blocks:
                self._pool.give_back(block)
        self.blocks = [np.zeros((_INITIAL_ROWS, self.dimension), dtype=np.float32)]
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
            pool = self._pool
            grown = pool.first_block(rows) if pool else np.zeros((rows, self.dimension), dtype=np.float32)
            grown[: len(first)] = first
            self.blocks[0] = grown
            self.capacity = rows
            if pool is not None:
                pool.give_back(first)  # only now: a block given back to a slab is zeroed
        while self.capacity < needed:
            self.blocks.append(self._whole_block())
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
