"""One BLAS thread for a block of numpy products, at the cost of a few C calls."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

_libraries: list[Any] | None = None
"""threadpoolctl's controllers of the BLAS libraries numpy loaded (untyped)."""
_depth = threading.local()
"""How many blocks the current thread is inside."""


class single_blas_thread:  # noqa: N801 - used as a function: ``with single_blas_thread():``
    """Run numpy's BLAS on one thread inside the block, then restore each library's count.

    A scoped search is a matrix-vector product over at most a few tens of thousands of rows, too
    small to gain from more threads, while a multi-threaded BLAS competes for the cores with the
    embedding model (and everything else) and turns it into a latency spike. Global settings are
    left alone outside the block.

    The BLAS libraries are found once, at the first block (libraries loaded later are not
    limited), and each block only reads and sets their thread counts: about 4 us, where
    ``threadpoolctl``'s ``limit()`` takes 9-16 us a block, a tenth of a selective search.

    As with ``limit()``, OpenBLAS's shared pool obeys one thread at a time (threadpoolctl lets the
    first thread to set it keep control, and ignores the others): a thread leaving its outermost
    block gives control back, so that the next thread's block, or the caller's own
    ``threadpool_limits``, takes effect. While two threads are inside at once, the second's limit
    is ignored and its product may use more threads.
    """

    __slots__ = ("_restores",)
    _restores: list[list[tuple[Any, int]]]

    def __init__(self) -> None:
        self._restores = []

    def __enter__(self) -> None:
        global _libraries
        if _libraries is None:
            found = ThreadpoolController().lib_controllers
            _libraries = [library for library in found if library.user_api == "blas"]
        restore: list[tuple[Any, int]] = []
        _depth.count = getattr(_depth, "count", 0) + 1
        try:
            for library in _libraries:
                threads = library.get_num_threads()
                if threads != 1:
                    library.set_num_threads(1)
                    restore.append((library, threads))
        except BaseException:
            self._leave(restore)
            raise
        self._restores.append(restore)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._leave(self._restores.pop())

    @staticmethod
    def _leave(restore: list[tuple[Any, int]]) -> None:
        for library, threads in reversed(restore):
            library.set_num_threads(threads)
        _depth.count -= 1
        if _depth.count == 0 and _libraries is not None:
            for library in _libraries:
                clear = getattr(type(library), "clear_controlling_thread", None)
                if clear is not None:  # OpenBLAS, in threadpoolctl versions that track a controller
                    clear()
