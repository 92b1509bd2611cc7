"""The backend kit: what every storage backend must do alike, written once.

A backend (built-in or plugin) uses these instead of its own copy, so that an
invariant of the contract — how ties are ordered, how scores are bounded, which
numbers an engine compares exactly, how a client's exception becomes a memcore
error — holds the same way on every store. The exact-evaluation fallback lives
in :class:`memcore.store.BaseStore` (:meth:`~memcore.store.BaseStore._expresses`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from uuid import UUID

from memcore.errors import DimensionMismatchError, MemcoreError
from memcore.filters import Scalar, is_number
from memcore.records import MemoryRecord

EXACT_FLOAT_LIMIT = 2**53
"""Below this magnitude every integer is a 64-bit float exactly. An engine that compares numbers
as floats (Qdrant's ranges, Chroma, a JSON number cast to double) compares a larger one inexactly:
``2**53 + 1`` equals ``2**53`` there. Such comparisons are evaluated exactly by the store."""


def order_key(record: MemoryRecord) -> tuple[datetime, UUID]:
    """The order of :meth:`~memcore.store.BaseStore.list`: ``created_at``, then id."""
    return record.created_at, record.id


def clamp_score(similarity: float) -> float:
    """A cosine similarity inside [-1, 1] (float rounding can step just outside)."""
    return min(1.0, max(-1.0, float(similarity)))


def exact_as_float(value: Scalar | tuple[Scalar, ...]) -> bool:
    """Whether an engine comparing numbers as 64-bit floats compares ``value`` exactly.

    :param value: a comparison's value (a tuple for ``$in``/``$nin``); non-numbers are exact.
    """
    values = value if isinstance(value, tuple) else (value,)
    return not any(is_number(v) and abs(v) >= EXACT_FLOAT_LIMIT for v in values)  # type: ignore[arg-type]


def check_same_dimension(stored: int | None, written: int) -> None:
    """Refuse vectors of ``written`` dimensions in a store that holds ``stored``-dimensional ones.

    :class:`~memcore.store.BaseStore` checks before calling ``_add``; a backend checks again
    under its own write lock, since another thread may have written the first vector since.

    :raises DimensionMismatchError: if the two differ (``stored`` ``None``: nothing fixed yet).
    """
    if stored is not None and stored != written:
        raise DimensionMismatchError(
            f"vector dimension {written} does not match the store's dimension {stored}"
        )


@contextmanager
def translated(translate: Callable[[Exception], MemcoreError]) -> Iterator[None]:
    """Run an engine call, re-raising anything but a memcore error as ``translate`` says.

    The engine's exception is kept as the new one's ``__cause__``, for debugging; callers only
    ever need to catch :class:`~memcore.errors.MemcoreError`.

    :param translate: the backend's mapping of its client's exceptions to memcore errors.
    """
    try:
        yield
    except MemcoreError:
        raise
    except Exception as exc:
        raise translate(exc) from exc
