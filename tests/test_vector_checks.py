"""Vector checks on every form a caller passes (lists, float32 and float64 arrays), the unit rows a
store keeps, and that a store never keeps the caller's array: a float32 array is checked as it is,
without the float64 copy that doubled a write's peak memory."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from memcore import open_store
from memcore.errors import InvalidVectorError
from memcore.scope import Scope
from memcore.testing.helpers import make_record
from memcore.validation import check_vectors, normalize_rows

FORMS = {
    "list": lambda rows: rows.tolist(),
    "float32": lambda rows: rows.astype(np.float32),
    "float64": lambda rows: rows.astype(np.float64),
}


def _rows(*values: float) -> npt.NDArray[np.float64]:
    rows = np.ones((3, 4))
    rows[1, : len(values)] = values
    return rows


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "bad",
    [(np.nan,), (np.inf,), (-np.inf,), (0.0, 0.0, 0.0, 0.0), (-0.0, -0.0, -0.0, -0.0)],
    ids=["nan", "inf", "minus-inf", "zero", "minus-zero"],
)
def test_every_form_of_a_bad_vector_is_refused(form: str, bad: tuple[float, ...]) -> None:
    with pytest.raises(InvalidVectorError):
        check_vectors(FORMS[form](_rows(*bad)), 3, 4)


@pytest.mark.parametrize("form", ["list", "float64"])
@pytest.mark.parametrize("value", [3.5e38, -3.5e38], ids=["over", "under"])
def test_a_value_beyond_float32_is_refused(form: str, value: float) -> None:
    with pytest.raises(InvalidVectorError, match="float32"):
        check_vectors(FORMS[form](_rows(value)), 3, 4)


def test_a_row_that_vanishes_in_float32_is_refused_as_zero() -> None:
    with pytest.raises(InvalidVectorError, match="all-zero"):
        check_vectors(_rows(1e-50, 1e-50, 1e-50, 1e-50), 3, 4)


def test_a_checked_float32_matrix_is_a_copy_unless_the_caller_copies_next() -> None:
    given = np.ones((2, 4), dtype=np.float32)
    assert not np.shares_memory(check_vectors(given, 2, 4), given)
    assert np.shares_memory(check_vectors(given, 2, 4, copy=False), given)
    assert not np.shares_memory(normalize_rows(given), given)


def test_unit_rows_match_the_float64_formula_across_chunks_and_magnitudes() -> None:
    rng = np.random.default_rng(4)
    rows = rng.standard_normal((700, 16)).astype(np.float32)
    rows[::3] *= np.float32(1e30)  # squares overflow float32
    rows[1::3] *= np.float32(1e-30)  # squares underflow float32
    wide = rows.astype(np.float64)
    expected = (wide / np.linalg.norm(wide, axis=1, keepdims=True)).astype(np.float32)
    assert np.array_equal(normalize_rows(rows), expected)


def test_a_store_keeps_its_own_vectors_not_the_callers_array() -> None:
    scope = Scope(tenant="t")
    with open_store("memory://") as store:
        records = [make_record(scope, "a"), make_record(scope, "b")]
        given = np.array([[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=np.float32)
        store.add(records, given)
        given[:] = 7.0  # the caller reuses its buffer
        stored = dict(store.vectors(scope, [r.id for r in records]))
        assert np.allclose(stored[records[0].id], [0.6, 0.8, 0.0, 0.0])
        assert np.allclose(stored[records[1].id], [0.0, 0.0, 1.0, 0.0])
