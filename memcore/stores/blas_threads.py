"""One BLAS thread for a block of numpy products, at the cost of a few C calls."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

_libraries: list[Any] | None = None
"""threadpoolctl's controllers of the BLAS libraries numpy loaded (untyped)."""


class single_blas_thread:  # noqa: N801 - used as a function: ``with single_blas_thread():``
    """Run numpy's BLAS on one thread inside the block, then restore each library's count.

    A scoped search is a matrix-vector product over at most a few tens of thousands of rows, too
    small to gain from more threads, while a multi-threaded BLAS competes for the cores with the
    embedding model (and everything else) and turns it into a latency spike. Global settings are
    left alone outside the block.

    The BLAS libraries are found once, at the first block (libraries loaded later are not
    limited), and each block only reads and sets their thread counts: about 2 us, where
    ``threadpoolctl``'s ``limit()`` takes 9-16 us a block, a tenth of a selective search.
    """

    __slots__ = ("_restore",)
    _restore: list[tuple[Any, int]]

    def __enter__(self) -> None:
        global _libraries
        if _libraries is None:
            found = ThreadpoolController().lib_controllers
            _libraries = [library for library in found if library.user_api == "blas"]
        self._restore = []
        for library in _libraries:
            threads = library.get_num_threads()
            if threads != 1:
                library.set_num_threads(1)
                self._restore.append((library, threads))

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for library, threads in self._restore:
            library.set_num_threads(threads)
