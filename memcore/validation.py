"""Input checks shared by every store, so that all backends refuse the same things.

Backends call these before anything reaches their engine: a vector with NaN
that a database silently stores (and then ranks first) is a bug we never let
through, whatever the engine would do with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import TypeAlias
from uuid import UUID

import numpy as np
import numpy.typing as npt
from pydantic_core import PydanticSerializationError

from memcore.errors import (
    DimensionMismatchError,
    InvalidIdError,
    InvalidInputError,
    InvalidLimitError,
    InvalidRecordError,
    InvalidVectorError,
    RecordTooLargeError,
    ScopeError,
)
from memcore.records import MemoryRecord
from memcore.scope import Scope

Vector: TypeAlias = Sequence[float] | npt.NDArray[np.floating]
"""A vector as callers pass it: a list of floats or a 1-d numpy array."""

Vectors: TypeAlias = Sequence[Vector] | npt.NDArray[np.floating]
"""Vectors as callers pass them: a sequence of vectors or a 2-d numpy array."""

Matrix: TypeAlias = npt.NDArray[np.float32]

MAX_RECORD_BYTES = 1_048_576
"""The largest serialised record (JSON, UTF-8) a store accepts: 1 MiB."""

MAX_BATCH_RECORDS = 10_000
"""The most records one ``add`` may write."""

MAX_BATCH_BYTES = 64 * 1_048_576
"""The largest batch one ``add`` may write, its records serialised: 64 MiB."""

DEFAULT_LIMIT = 10
"""How many hits :meth:`Store.search` returns unless told otherwise."""

MAX_LIMIT = 10_000
"""The largest ``limit`` any read accepts."""

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_scope(scope: Scope) -> Scope:
    """Check a scope argument; return it, validated.

    Values set without validation (``model_construct``, ``model_copy(update=...)``)
    are validated again, and an empty scope is accepted only when
    :meth:`Scope.everything` made it.

    :raises ScopeError: for anything else.
    """
    if not isinstance(scope, Scope):
        raise ScopeError(f"scope must be a memcore Scope, got {type(scope).__name__}")
    if scope.is_everything:
        if not scope.is_admin:
            raise ScopeError("an empty scope would match every record; admin tools use Scope.everything()")
        return scope
    values = scope.as_tuple()
    key = (type(scope), values)
    # Only scopes of plain strings are looked up and remembered: a value set without validation
    # could be an object that merely compares equal to (and hashes like) a validated string.
    plain = all(value is None or type(value) is str for value in values)
    checked = _CHECKED_SCOPES.get(key) if plain else None
    if checked is None:
        checked = type(scope).model_validate(scope.model_dump())
        if plain:
            if len(_CHECKED_SCOPES) >= _CHECKED_SCOPES_KEPT:
                _CHECKED_SCOPES.clear()
            _CHECKED_SCOPES[key] = checked
    return checked


# Scopes already validated, by type and values: an agent reads through a few scopes many times,
# and validating one costs ~10 us (values are matched against a pattern each time).
_CHECKED_SCOPES: dict[tuple[type[Scope], tuple[str | None, ...]], Scope] = {}
_CHECKED_SCOPES_KEPT = 4_096


def check_dimension(dimension: int | None) -> int | None:
    """Check a store's ``dimension`` argument: ``None`` or a positive integer."""
    if dimension is not None and (
        isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1
    ):
        raise InvalidInputError(f"dimension must be a positive integer, got {dimension!r}")
    return dimension


def check_records(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """Check a batch of records to write; return validated copies.

    Every record is validated again, so that one built with ``model_construct``
    or ``model_copy(update=...)`` (which skip validation), or mutated since,
    cannot store what the record model forbids; the copies also keep the store
    independent of the caller's objects.

    :raises InvalidRecordError: for a non-record, an invalid record, an id
        repeated within the batch for one scope, or text that is not valid Unicode.
    :raises RecordTooLargeError: for a record over :data:`MAX_RECORD_BYTES`, or a batch of more
        than :data:`MAX_BATCH_RECORDS` records or :data:`MAX_BATCH_BYTES` bytes.
    :raises ScopeError: for a record whose scope is empty or invalid.
    """
    if isinstance(records, MemoryRecord) or not isinstance(records, Sequence):
        raise InvalidRecordError("add() takes a sequence of MemoryRecord")
    if len(records) > MAX_BATCH_RECORDS:
        raise RecordTooLargeError(
            f"add() writes at most {MAX_BATCH_RECORDS} records at once, got {len(records)}; split the batch"
        )
    checked: list[MemoryRecord] = []
    seen: set[tuple[tuple[str | None, ...], UUID]] = set()
    total = 0
    for record in records:
        if not isinstance(record, MemoryRecord):
            raise InvalidRecordError(f"expected MemoryRecord, got {type(record).__name__}")
        try:
            serialised = record.model_dump_json().encode()
        except (PydanticSerializationError, UnicodeError) as exc:
            raise InvalidRecordError(f"record {record.id} cannot be serialised: {exc}") from None
        if len(serialised) > MAX_RECORD_BYTES:
            raise RecordTooLargeError(
                f"record {record.id} is {len(serialised)} bytes serialised; the limit is {MAX_RECORD_BYTES}"
            )
        total += len(serialised)
        if total > MAX_BATCH_BYTES:
            raise RecordTooLargeError(
                f"add() writes at most {MAX_BATCH_BYTES} bytes of records at once; split the batch"
            )
        copy = MemoryRecord.model_validate_json(serialised)
        key = (copy.scope.as_tuple(), copy.id)
        if key in seen:
            raise InvalidRecordError(f"record id {copy.id} appears twice in one batch for one scope")
        seen.add(key)
        checked.append(copy)
    return checked


def check_vectors(vectors: Vectors, count: int, dimension: int | None, *, copy: bool = True) -> Matrix:
    """Check vectors to write and return them as a C-contiguous float32 matrix.

    :param vectors: one vector per record.
    :param count: how many records they belong to.
    :param dimension: the store's dimension, or ``None`` if it has none yet.
    :param copy: return a copy even of a float32 matrix (``False``: the caller copies it next,
        as :func:`normalize_rows` does, and would otherwise hold two copies at once).
    :raises InvalidVectorError: for a count mismatch, ragged or empty vectors, NaN,
        infinities, values beyond float32 or all-zero vectors (cosine is undefined).
    :raises DimensionMismatchError: if the dimension differs from the store's.
    """
    try:
        given = len(vectors)
    except TypeError:
        raise InvalidVectorError(
            f"vectors must be a sequence or an array, got {type(vectors).__name__}"
        ) from None
    if given != count:
        raise InvalidVectorError(f"got {given} vectors for {count} records")
    if count == 0:
        return np.zeros((0, dimension or 0), dtype=np.float32)
    try:
        matrix = _as_floats(vectors)
    except (ValueError, TypeError) as exc:
        raise InvalidVectorError(f"vectors must be equal-length sequences of numbers: {exc}") from None
    if matrix.ndim != 2:
        raise InvalidVectorError(f"expected one 1-d vector per record, got shape {matrix.shape}")
    return _check_matrix(matrix, dimension, copy)


def check_query_vector(vector: Vector, dimension: int | None) -> Matrix:
    """Check one query vector; return it as a (1, d) float32 matrix (see :func:`check_vectors`)."""
    try:
        array = _as_floats(vector)
    except (ValueError, TypeError) as exc:
        raise InvalidVectorError(f"a query vector is a sequence of numbers: {exc}") from None
    if array.ndim != 1:
        raise InvalidVectorError(f"a query vector is 1-d, got shape {array.shape}")
    return _check_matrix(array.reshape(1, -1), dimension, copy=True)


def _as_floats(values: Vectors | Vector) -> npt.NDArray[np.float32] | npt.NDArray[np.float64]:
    """``values`` as an array of floats: a float32 or float64 array as it is (checking it needs no
    float64 copy, twice the batch's vectors at a write), anything else converted to float64."""
    if isinstance(values, np.ndarray) and values.dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        return values
    return np.asarray(values, dtype=np.float64)


def _check_matrix(
    matrix: npt.NDArray[np.float32] | npt.NDArray[np.float64], dimension: int | None, copy: bool
) -> Matrix:
    if matrix.shape[1] == 0:
        raise InvalidVectorError("vectors must not be empty")
    if dimension is not None and matrix.shape[1] != dimension:
        raise DimensionMismatchError(
            f"vector dimension {matrix.shape[1]} does not match the store's dimension {dimension}"
        )
    if not np.isfinite(matrix).all():
        raise InvalidVectorError("vectors must not contain NaN or infinity")
    if matrix.dtype != np.float32 and ((matrix > _FLOAT32_MAX).any() or (matrix < -_FLOAT32_MAX).any()):
        raise InvalidVectorError("vector values must fit in float32")
    convert = np.array if copy else np.asarray  # np.array copies even a C-contiguous float32 matrix
    result: Matrix = convert(matrix, dtype=np.float32, order="C")
    if not result.any(axis=1).all():
        raise InvalidVectorError("all-zero vectors have no direction; cosine similarity is undefined")
    return result


def normalize_rows(matrix: Matrix) -> Matrix:
    """Rows scaled to unit length (for cosine similarity as a dot product), as a new matrix.

    Computed in float64 so that vectors whose squares overflow float32 still normalise
    correctly, :data:`_NORMALIZED_AT_ONCE` rows at a time: a float64 copy of a whole batch
    would double what a write holds at its peak.
    """
    result: Matrix = np.empty(matrix.shape, dtype=np.float32)
    for start in range(0, len(matrix), _NORMALIZED_AT_ONCE):
        wide = matrix[start : start + _NORMALIZED_AT_ONCE].astype(np.float64)
        wide /= np.linalg.norm(wide, axis=1, keepdims=True)
        result[start : start + _NORMALIZED_AT_ONCE] = wide
    return result


_NORMALIZED_AT_ONCE = 256


TTL: TypeAlias = timedelta | int | float
"""A time to live: a :class:`~datetime.timedelta`, or seconds."""


def check_ttl(ttl: TTL) -> timedelta:
    """A positive, finite time to live as a timedelta.

    :raises InvalidInputError: for anything else (zero, negative, NaN, a string).
    """
    if isinstance(ttl, bool) or not isinstance(ttl, (timedelta, int, float)):
        raise InvalidInputError(f"ttl must be a timedelta or a number of seconds, got {ttl!r}")
    if not isinstance(ttl, timedelta):
        if not math.isfinite(ttl):
            raise InvalidInputError(f"ttl must be finite, got {ttl!r}")
        try:
            ttl = timedelta(seconds=ttl)
        except OverflowError:
            raise InvalidInputError(f"ttl {ttl!r} is too long") from None
    if ttl <= timedelta(0):
        raise InvalidInputError(f"ttl must be positive, got {ttl}")
    return ttl


def check_ids(ids: Sequence[UUID | str]) -> list[UUID]:
    """Parse record ids.

    :raises InvalidIdError: for anything that is not a UUID or a UUID string.
    """
    if isinstance(ids, str | UUID) or not isinstance(ids, Sequence):
        raise InvalidIdError("ids must be a sequence of UUIDs")
    parsed: list[UUID] = []
    for value in ids:
        if isinstance(value, UUID):
            parsed.append(value)
            continue
        if not isinstance(value, str):
            raise InvalidIdError(f"record ids are UUIDs, got {type(value).__name__}")
        try:
            parsed.append(UUID(value))
        except ValueError:
            raise InvalidIdError(f"malformed record id {value!r}: expected a UUID") from None
    return parsed


def check_limit(limit: int | None, *, required: bool) -> int | None:
    """Check a ``limit`` argument: a positive int up to :data:`MAX_LIMIT`.

    :param required: whether ``None`` (no limit) is refused.
    :raises InvalidLimitError: otherwise.
    """
    if limit is None and not required:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLimitError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return limit
