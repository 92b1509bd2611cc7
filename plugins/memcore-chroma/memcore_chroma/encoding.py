"""How a memcore record is laid out in a Chroma collection.

One record is one Chroma entry:

* ``id``: the record's :func:`entry_id`, the :func:`~memcore.scope.storage_id` of its exact scope
  and its id (a record is its scope plus its id: the same id in two scopes is two entries);
* ``document``: the whole record as JSON, the source of truth that every read decodes;
* ``metadata``: flat keys that only exist to be filtered on natively::

    scope.tenant, scope.user_id, ...   the scope fields that are set
    scope.key                          the digest of all four scope fields (unset ones as null),
                                       what an exact scope (Scope.exact()) selects on
    record_id                          the record's own id, what reads by id select on
    role, kind                         strings
    created_at                         microseconds since the epoch (an int, exact)
    expires_at                         when the record expires, in the same unit; a record that
                                       never expires holds NEVER_EXPIRES (2**53 - 1), so that every
                                       entry has the key: a ``where`` on a key an entry lacks never
                                       matches it (older collections are backfilled at open)
    vec                                whether the record has a real vector
    m.<key>                            a scalar metadata value; numbers as floats
    l.<key>                            a non-empty list metadata value
    t.<key>                            the value's type: "str", "bool", "num" or "list"

Numbers are stored as floats because Chroma compares an int column with a float
operand by truncating the operand (``$ne: 0.5`` skips a stored ``0``); with every
number a float, comparisons are float against float, exact below 2**53, and
:mod:`memcore_chroma.filters` widens them (and post-filters) beyond. The exact
value, including integers up to 2**63, lives in the JSON document.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memcore.errors import StoreCorruptedError
from memcore.filters import column_values
from memcore.records import MemoryRecord, epoch_micros
from memcore.scope import SCOPE_FIELDS, Scope, storage_id

Where = dict[str, Any]
"""A Chroma ``where`` document."""

ChromaMetadata = dict[str, str | int | float | bool | list[str]]

SCOPE_PREFIX = "scope."
SCOPE_KEY = "scope.key"
"""Chroma's ``where`` cannot ask for a missing key, so an exact scope matches this digest instead."""
RECORD_ID_KEY = "record_id"
"""The record's own id: an entry's Chroma id is its :func:`entry_id`."""
VECTOR_KEY = "vec"
CREATED_AT_KEY = "created_at"
EXPIRES_AT_KEY = "expires_at"
TYPE_STR, TYPE_BOOL, TYPE_NUM, TYPE_LIST = "str", "bool", "num", "list"
VALUE_TYPES = (TYPE_STR, TYPE_BOOL, TYPE_NUM, TYPE_LIST)


def scalar_key(key: str) -> str:
    """The Chroma key holding the scalar value of ``metadata.<key>``."""
    return f"m.{key}"


def list_key(key: str) -> str:
    """The Chroma key holding the (non-empty) list value of ``metadata.<key>``."""
    return f"l.{key}"


def type_key(key: str) -> str:
    """The Chroma key holding the type of ``metadata.<key>``, present whenever the key is."""
    return f"t.{key}"


def entry_id(record: MemoryRecord) -> str:
    """The Chroma id of the entry holding ``record``: the storage id of its exact scope and id."""
    return str(storage_id(record.scope, record.id))


def exact_entries(scope: Scope, ids: Sequence[UUID]) -> list[str]:
    """The Chroma ids of the entries that would hold these records of the exact ``scope``."""
    return [str(storage_id(scope, record_id)) for record_id in ids]


def flat_metadata(record: MemoryRecord, has_vector: bool) -> ChromaMetadata:
    """The flat, filterable Chroma metadata of ``record``."""
    flat: ChromaMetadata = {f"{SCOPE_PREFIX}{name}": value for name, value in record.scope.items()}
    flat[SCOPE_KEY] = record.scope.digest()
    flat[RECORD_ID_KEY] = str(record.id)
    flat.update(column_values(record))
    flat[VECTOR_KEY] = has_vector
    for key, value in record.metadata.items():
        if isinstance(value, list):
            flat[type_key(key)] = TYPE_LIST
            if value:  # Chroma refuses empty lists; t.<key> alone records one
                flat[list_key(key)] = list(value)
        elif isinstance(value, bool):
            flat[type_key(key)], flat[scalar_key(key)] = TYPE_BOOL, value
        elif isinstance(value, int | float):
            flat[type_key(key)], flat[scalar_key(key)] = TYPE_NUM, float(value)
        else:
            flat[type_key(key)], flat[scalar_key(key)] = TYPE_STR, value
    return flat


def encode(record: MemoryRecord) -> str:
    """The document of ``record``: its JSON."""
    return record.model_dump_json()


def decode(entry: str, document: str | None, *, legacy: bool = False) -> MemoryRecord:
    """The record the document of the entry ``entry`` holds.

    :param legacy: the entry is in the layout of format 1, named by its record's id alone.
    :raises StoreCorruptedError: if the document is missing or not a valid record, or the
        entry's id is not the record's (:func:`entry_id`; its id, if ``legacy``).
    """
    if document is None:
        raise StoreCorruptedError(f"the Chroma entry {entry} has no document; it was not written by memcore")
    try:
        record = MemoryRecord.from_stored_json(document)
    except ValueError as exc:
        raise StoreCorruptedError(f"the Chroma entry {entry} does not hold a valid record: {exc}") from None
    if entry != (str(record.id) if legacy else entry_id(record)):
        raise StoreCorruptedError(
            f"the Chroma entry {entry} holds the record {record.id} of {record.scope}, which is not its id "
            "(an entry written by a memcore-chroma older than format 2?)"
        )
    return record


def decode_found(found: Any) -> list[MemoryRecord]:
    """The records of a Chroma ``get`` result that included ``documents``."""
    return [decode(i, d) for i, d in zip(found["ids"], found["documents"] or [], strict=True)]


def scope_clauses(scope: Scope) -> list[Where]:
    """One equality per set scope field (none for :meth:`Scope.everything`); for an exact scope
    (:meth:`Scope.exact`) only the digest of all four fields, which fixes every field, set or unset.

    Chroma evaluates each clause of a ``where`` over every entry it matches, however selective the
    others are: the field equalities of an exact scope, which match the scope's whole tenant,
    would cost as much as reading it.
    """
    if scope.is_exact:
        return [{SCOPE_KEY: scope.digest()}]
    return [{f"{SCOPE_PREFIX}{name}": value} for name, value in scope.items()]


def owned_by(scope: Scope) -> Callable[[Any], bool]:
    """Whether an entry's flat metadata is that of a record visible through ``scope``
    (:meth:`Scope.matches`, as :func:`scope_clauses` selects)."""
    if scope.is_exact:
        digest = scope.digest()
        return lambda meta: meta is not None and meta.get(SCOPE_KEY) == digest
    fields = [(f"{SCOPE_PREFIX}{name}", value) for name, value in scope.items()]
    return lambda meta: meta is not None and all(meta.get(key) == value for key, value in fields)


def scope_key(fields: tuple[str | None, ...]) -> str:
    """The :data:`SCOPE_KEY` of a record whose scope has these four fields (:meth:`Scope.digest`)."""
    return scope_of(fields).digest()


def scope_of(fields: tuple[str | None, ...]) -> Scope:
    """The scope with these four fields, as stored (not validated again: a record stored before
    every scope had a tenant has none)."""
    tenant, user_id, agent_id, session_id = fields
    return Scope.model_construct(tenant=tenant, user_id=user_id, agent_id=agent_id, session_id=session_id)


def stored_scope(metadata: dict[str, Any] | None) -> tuple[str | None, ...]:
    """The scope tuple recorded in an entry's flat metadata."""
    metadata = metadata or {}
    return tuple(metadata.get(f"{SCOPE_PREFIX}{name}") for name in SCOPE_FIELDS)


def is_live(record: MemoryRecord, now_micros: int | None) -> bool:
    """Whether ``record`` expires after ``now_micros`` (epoch microseconds; ``None``: no condition)."""
    return now_micros is None or epoch_micros(record.expires) > now_micros


def live_clauses(now_micros: int | None) -> list[Where]:
    """The implicit read condition as ``where`` clauses: the entries expiring after ``now_micros``
    (epoch microseconds; ``None``: no condition, none)."""
    return [] if now_micros is None else [{EXPIRES_AT_KEY: {"$gt": now_micros}}]


def all_of(clauses: list[Where]) -> Where | None:
    """``$and`` of ``clauses``; Chroma wants at least two, so one is returned bare, none as ``None``."""
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def any_of(clauses: list[Where]) -> Where:
    """``$or`` of at least one clause (one is returned bare)."""
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def placeholder_vectors(count: int, dimension: int) -> npt.NDArray[np.float32]:
    """Stand-in vectors for records without one: Chroma needs a vector per entry.

    Searches exclude them with ``vec: true``; they never score.
    """
    vectors = np.zeros((count, dimension), dtype=np.float32)
    vectors[:, 0] = 1.0
    return vectors
