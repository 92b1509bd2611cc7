"""How a :class:`~memcore.records.MemoryRecord` is laid out as a Qdrant payload.

A point's payload holds the record twice: once as its exact JSON (``record``),
from which reads rebuild it, and once as fields shaped for Qdrant's filters:

* ``record_id``: the record's id. A record is its exact scope plus its id, so the point's id is
  :func:`memcore.scope.storage_id` of the two, and reads by id match this field (and the scope);
* the scope fields ``tenant``, ``user_id``, ``agent_id``, ``session_id`` (absent when unset),
  and ``scope_keys``: one keyword per subset of them that a read scope can be (:func:`scope_key`),
  so that any read scope is a single indexed match; a scope of two fields as two conditions would
  have Qdrant Edge check the unselective one (the tenant) point by point. Every read scope names a
  tenant, so a record with a tenant lists the subsets holding it (8 keys for 4 fields); one
  stored before every scope had a tenant lists every non-empty subset. Points written before
  this rule list every subset in both cases, which reads and :func:`exact_scope_counts` accept;
  each key is a string qdrant-edge-py converts on every write (a few microseconds each);
* ``role``, ``kind``; ``created_at`` and ``expires_at`` as integer microseconds since the epoch
  (exact, sortable); a record that never expires stores :data:`~memcore.records.NEVER_EXPIRES`'s.
  Points written before records could expire have no ``expires_at``: they never expire, and the
  filter compiler treats the missing key as that value (:mod:`memcore_qdrant.filters`);
* ``text``: the content case-folded, for case-insensitive substring search;
* ``terms``: its keyword terms, each once, so that a term's document frequency in a scope is
  an indexed count (:mod:`memcore_qdrant.keywords`);
* metadata split by value type: ``m_str``, ``m_list``, ``m_int``, ``m_float``, ``m_bool``
  (objects keyed by metadata key), plus ``m_keys`` listing the keys present. Booleans are
  stored as the keywords ``"true"``/``"false"`` (:func:`bool_keyword`): qdrant-edge-py
  turns a Python ``bool`` in a match condition into an integer, which never matches.

Splitting by type is what lets native conditions reproduce the portable
semantics exactly: a keyword match never confuses ``"1"``, ``1`` and ``true``,
``$contains`` looks only at lists, ints and floats compare as numbers, and
``$exists`` sees an empty list as present.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from itertools import combinations
from typing import Any, Final

from memcore.errors import MemcoreError, StoreCorruptedError
from memcore.filters import COLUMN_FIELDS, column_values
from memcore.records import MemoryRecord, MetadataValue
from memcore.scope import SCOPE_FIELDS
from memcore.stored_records import decode_stored_many
from memcore_qdrant.keywords import SparseVector, distinct_terms, document_vector

RECORD: Final = "record"
RECORD_ID: Final = "record_id"
TEXT: Final = "text"
CREATED_AT: Final = "created_at"
EXPIRES_AT: Final = "expires_at"
METADATA_KEYS: Final = "m_keys"
STR: Final = "m_str"
LIST: Final = "m_list"
INT: Final = "m_int"
FLOAT: Final = "m_float"
BOOL: Final = "m_bool"
TENANT: Final = "tenant"
SCOPE_KEYS: Final = "scope_keys"
TERMS: Final = "terms"

READ_FIELDS: Final = (RECORD, CREATED_AT)
"""What a read asks Qdrant for: a whole payload (terms, scope keys, the content again) would be
turned into Python objects on every hit, only for the record's JSON to be decoded."""

KEYWORD_FIELDS: Final = (
    *SCOPE_FIELDS,
    SCOPE_KEYS,
    *(spec.name for spec in COLUMN_FIELDS if spec.is_keyword),
    TERMS,
    RECORD_ID,
)
"""Payload fields that get a keyword index (the scope fields first)."""

INTEGER_FIELDS: Final = tuple(spec.name for spec in COLUMN_FIELDS if spec.is_time)
"""Payload fields that get an integer index with ranges (the time fields, in microseconds)."""


def metadata_path(group: str, key: str) -> str:
    """The payload path of one metadata key within a typed group (``m_int."my-key"``)."""
    return f'{group}."{key}"'


def scope_key(pairs: Sequence[tuple[str, str]]) -> str:
    """The keyword naming a set of scope fields and their values: ``tenant=acme|user_id=alice``.

    Scope values never contain ``=`` or ``|`` (see :func:`memcore.scope.validate_scope_value`).
    """
    return "|".join(f"{name}={value}" for name, value in pairs)


ScopeValues = tuple[str | None, ...]
"""A scope as its four field values (:data:`~memcore.scope.SCOPE_FIELDS` order), ``None`` where unset."""


def scope_values(key: str) -> ScopeValues:
    """The scope fields a :func:`scope_key` names, ``None`` for the others.

    :raises StoreCorruptedError: if ``key`` is not a scope key memcore wrote.
    """
    given = dict(pair.split("=", 1) for pair in key.split("|") if "=" in pair)
    if not given or set(given) - set(SCOPE_FIELDS) or key != scope_key(list(given.items())):
        raise StoreCorruptedError(f"a Qdrant point has an invalid scope key {key!r}")
    return tuple(given.get(name) for name in SCOPE_FIELDS)


def exact_scope_counts(facet: Iterable[tuple[str, int]]) -> list[tuple[ScopeValues, int]]:
    """The exact scopes of a set of points and how many points each holds, from the facet of their
    ``scope_keys`` (each key with the number of points listing it).

    The keys with a tenant must come from the points with a tenant, the keys without one from the
    points without one (:func:`scope_key_facets` says how to ask). Within either group a point
    lists the key of every subset of its scope fields in that group (:func:`_scope_keys`), so a
    key's count is the number of points whose scope includes those fields with those values: the
    sum, over the exact scopes extending it, of their counts. Möbius inversion on that lattice
    undoes the sum: an exact scope's count is the alternating sum, over the keys of its group
    extending its own, of their counts (``(-1)**`` the number of fields added). Keys with the same
    set of fields are grouped, so each key is projected once on each subset of its fields; a key
    whose count comes out zero is a subset of other points' scopes, not a scope of its own.
    """
    # sums[outer][inner][values of the inner fields] = the counts of keys with fields ``outer``
    # whose values on the ``inner`` fields (a subset of ``outer``) are these.
    sums: dict[int, dict[int, dict[ScopeValues, int]]] = {}
    keys: list[tuple[int, ScopeValues]] = []
    for key, count in facet:
        values = scope_values(key)
        outer = _fields_mask(values)
        keys.append((outer, values))
        by_inner = sums.setdefault(outer, {})
        for inner in _submasks(outer):
            bucket = by_inner.setdefault(inner, {})
            projected = _projected(values, inner)
            bucket[projected] = bucket.get(projected, 0) + count
    found = []
    for mask, values in keys:
        exact = sum(
            (-1) ** (outer.bit_count() - mask.bit_count()) * by_inner.get(mask, {}).get(values, 0)
            for outer, by_inner in sums.items()
            if outer & mask == mask and outer & _TENANT_BIT == mask & _TENANT_BIT
        )
        if exact > 0:
            found.append((values, exact))
    return found


_TENANT_BIT: Final = 1 << SCOPE_FIELDS.index(TENANT)


def has_tenant(key: str) -> bool:
    """Whether a :func:`scope_key` names a tenant (the tenant comes first in a key)."""
    return key.startswith(f"{TENANT}=")


def _fields_mask(values: ScopeValues) -> int:
    return sum(1 << index for index, value in enumerate(values) if value is not None)


def _submasks(mask: int) -> Iterator[int]:
    sub = mask
    while sub:
        yield sub
        sub = (sub - 1) & mask


def _projected(values: ScopeValues, mask: int) -> ScopeValues:
    return tuple(value if mask >> index & 1 else None for index, value in enumerate(values))


def _scope_keys(pairs: list[tuple[str, str]]) -> list[str]:
    return list(_keys_of_read_scopes(tuple(pairs)))


@functools.lru_cache(maxsize=4_096)
def _keys_of_read_scopes(pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The keys of every subset of ``pairs`` holding the tenant, if it is there (the first pair);
    of every non-empty subset otherwise. Memoised: the records of a batch mostly share one scope."""
    if pairs and pairs[0][0] == TENANT:
        tenant, rest = pairs[0], pairs[1:]
        subsets = (combinations(rest, size) for size in range(len(rest) + 1))
        return tuple(scope_key((tenant, *subset)) for group in subsets for subset in group)
    subsets = (combinations(pairs, size) for size in range(1, len(pairs) + 1))
    return tuple(scope_key(subset) for group in subsets for subset in group)


def bool_keyword(value: bool) -> str:
    """How a boolean metadata value is stored in ``m_bool``."""
    return "true" if value else "false"


def _group_of(value: MetadataValue) -> str:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, list):
        return LIST
    return STR


def to_payload(record: MemoryRecord) -> dict[str, Any]:
    """The payload of the point that stores ``record``."""
    text = record.message.content.casefold()
    payload: dict[str, Any] = {
        RECORD: record.model_dump_json(),
        RECORD_ID: str(record.id),
        TEXT: text,
        TERMS: distinct_terms(text),
        **column_values(record),
        METADATA_KEYS: sorted(record.metadata),
    }
    payload.update(record.scope.items())
    payload[SCOPE_KEYS] = _scope_keys(record.scope.items())
    for key, value in record.metadata.items():
        stored: Any = bool_keyword(value) if isinstance(value, bool) else value
        payload.setdefault(_group_of(value), {})[key] = list(stored) if isinstance(stored, list) else stored
    return payload


def keyword_vector(payload: dict[str, Any]) -> SparseVector:
    """The ``keywords`` sparse vector of a point, from its payload (so that copies rebuild it)."""
    return document_vector(str(payload.get(TEXT, "")))


def from_payload(payload: dict[str, Any] | None) -> MemoryRecord:
    """Rebuild the record a point's payload holds.

    :raises StoreCorruptedError: if the payload is not one memcore wrote.
    """
    return records_from([payload])[0]


def records_from(payloads: Sequence[dict[str, Any] | None]) -> list[MemoryRecord]:
    """Rebuild the records these payloads hold, in order, in one pass
    (:func:`memcore.stored_records.decode_stored_many`).

    :raises StoreCorruptedError: if a payload is not one memcore wrote.
    """
    raws = [None if payload is None else payload.get(RECORD) for payload in payloads]
    if not all(isinstance(raw, str) for raw in raws):
        raise StoreCorruptedError("a Qdrant point has no memcore record in its payload")
    try:
        return decode_stored_many(raws)  # type: ignore[arg-type]  # all str, checked above
    except MemcoreError as exc:
        raise StoreCorruptedError(f"a Qdrant point holds an invalid memcore record: {exc}") from None
