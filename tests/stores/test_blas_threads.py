"""One BLAS thread inside a search's products, and the process's setting restored after."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_limits

from memcore.stores import blas_threads
from memcore.stores.blas_threads import single_blas_thread


def _blas_threads() -> list[int]:
    return [info["num_threads"] for info in ThreadpoolController().info() if info["user_api"] == "blas"]


@pytest.fixture
def two_blas_threads() -> object:
    np.ones((2, 2)) @ np.ones(2)  # numpy's BLAS is loaded
    if not _blas_threads():
        pytest.skip("numpy is built without a BLAS library threadpoolctl can see")
    with threadpool_limits(limits=2, user_api="blas"):
        yield


@pytest.mark.usefixtures("two_blas_threads")
def test_one_thread_inside_and_the_count_restored_after() -> None:
    with single_blas_thread():
        assert set(_blas_threads()) == {1}
    assert set(_blas_threads()) == {2}


@pytest.mark.usefixtures("two_blas_threads")
def test_restored_when_the_block_raises_and_when_nested() -> None:
    with pytest.raises(ZeroDivisionError), single_blas_thread():
        with single_blas_thread():
            assert set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {1}
        _ = 1 / 0
    assert set(_blas_threads()) == {2}


@pytest.mark.usefixtures("two_blas_threads")
def test_the_same_limiter_object_can_be_entered_again() -> None:
    limiter = single_blas_thread()
    for _ in range(2):
        with limiter:
            assert set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {2}


@pytest.mark.usefixtures("two_blas_threads")
def test_a_worker_thread_is_limited_after_the_main_thread_was() -> None:
    """threadpoolctl lets only one thread set OpenBLAS's pool: a block that kept control after it
    ended would leave every other thread's searches unlimited."""
    with single_blas_thread():
        pass
    seen: list[list[int]] = []

    def search() -> None:
        with single_blas_thread():
            seen.append(_blas_threads())

    worker = threading.Thread(target=search)
    worker.start()
    worker.join()
    assert seen == [[1] * len(seen[0])]


@pytest.mark.usefixtures("two_blas_threads")
def test_a_long_lived_worker_leaves_the_callers_own_limits_working() -> None:
    """Stores search on long-lived worker threads (the async API's): one that searched must not
    keep the process's BLAS control from the application's own ``threadpool_limits``."""
    searched, done = threading.Event(), threading.Event()

    def worker() -> None:
        with single_blas_thread():
            pass
        searched.set()
        done.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert searched.wait(10)
        with threadpool_limits(limits=1, user_api="blas"):
            assert set(_blas_threads()) == {1}
    finally:
        done.set()
        thread.join()


@pytest.mark.usefixtures("two_blas_threads")
def test_one_limiter_entered_twice_at_once_restores_the_count() -> None:
    limiter = single_blas_thread()
    with limiter:
        with limiter:
            assert set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {1}
    assert set(_blas_threads()) == {2}


class _FailingLibrary:
    def get_num_threads(self) -> int:
        return 4

    def set_num_threads(self, threads: int) -> None:
        raise OSError("the library refused")


@pytest.mark.usefixtures("two_blas_threads")
def test_a_library_failing_to_set_leaves_the_others_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    with single_blas_thread():
        pass  # the real libraries are found
    libraries = blas_threads._libraries
    assert libraries
    monkeypatch.setattr(blas_threads, "_libraries", [*libraries, _FailingLibrary()])
    with pytest.raises(OSError, match="refused"), single_blas_thread():
        pass
    assert set(_blas_threads()) == {2}
