"""One BLAS thread inside a search's products, and the process's setting restored after."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_limits

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
