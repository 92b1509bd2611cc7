"""One owner's records in parallel arrays: vectors, times, and session/role/kind/metadata columns.

The unit of the built-in stores' index (:mod:`memcore.stores.scoped_index`): all
records of one (tenant, user, agent), whatever their session, so that recall
across an agent's sessions is one matrix-vector product and a session is a mask.
Rows are appended as records arrive; as long as they arrive in time order (the
normal case, since timestamps come from a monotonic clock) the row order *is*
the time order, so "the last 20 records" is a slice, not a sort. Every keyword
field of the filter table (:data:`memcore.filters.COLUMN_FIELDS`: ``role``,
``kind``) has a code column, ``created_at`` and ``expires_at`` a microsecond column,
and each metadata key a filter tests gets typed columns
(:mod:`memcore.stores.metadata_columns`) the first time one does, so filters are
answered with numpy masks.

A record is kept as its JSON, not as a Python object: about 220 bytes for a
turn where a :class:`~memcore.records.MemoryRecord` takes 2 kB. The JSON leaves out
the scope, which every row of a session shares (spliced back in when a record is
decoded), and null fields. Reads decode the
records they return; the last thousand records written or read (:class:`RecordCache`)
stay decoded, so a conversation's window and its recent recalls decode nothing.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memcore.errors import StoreCorruptedError
from memcore.filters import COLUMN_FIELDS, METADATA_PREFIX, MISSING, And, Comparison, Filter, Not, Or
from memcore.queries import Order
from memcore.records import NEVER_EXPIRES, MemoryRecord, epoch_micros
from memcore.scope import Scope
from memcore.stores.keyword_postings import Postings
from memcore.stores.metadata_columns import MetadataColumn, bounds_test, covers_test
from memcore.stores.vector_blocks import BlockPool, VectorBlocks
from memcore.validation import Matrix

_INITIAL_CAPACITY = 16
DECODED_RECORDS = 1024
"""How many decoded records an index keeps (the most recently written or read), over all partitions."""
_CODED_FIELDS = tuple(spec for spec in COLUMN_FIELDS if spec.is_keyword)
_FIELD_CODES: dict[str, dict[str, int]] = {spec.name: {} for spec in _CODED_FIELDS}
_SESSION_CODES: dict[str, int] = {}
_NO_SESSION = -1
_CODES_LOCK = threading.Lock()
_MASKED_OPERATORS = frozenset({"$eq", "$ne", "$in", "$nin", "$exists"})
_NEVER = epoch_micros(NEVER_EXPIRES)
ID_LOW_BITS = (1 << 64) - 1
"""The low 64 bits of a record id: :attr:`Partition.id_low`."""
_TIME_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "$eq": np.equal,
    "$ne": np.not_equal,
    "$gt": np.greater,
    "$gte": np.greater_equal,
    "$lt": np.less,
    "$lte": np.less_equal,
}
"""The operators a time field's microsecond column answers with one vectorised comparison."""


@dataclass(frozen=True)
class Rows:
    """The records of one exact scope in columns: what a jsonl snapshot writes and loads back.

    Row ``i`` of every field describes one record; :meth:`ScopedIndex.scope_rows` makes one and
    :meth:`ScopedIndex.load_rows` takes it without decoding the records' JSON.
    """

    encoded: list[bytes]
    """Each record's whole JSON: what :meth:`MemoryRecord.model_dump_json` writes, or the same
    record with null fields left out and the scope first (as :meth:`ScopedIndex.scope_rows` gives it)."""
    ids: npt.NDArray[np.uint8]
    """Each record's UUID as 16 bytes: shape ``(n, 16)``."""
    created: npt.NDArray[np.int64]
    """Each record's ``created_at`` in epoch microseconds."""
    expires: npt.NDArray[np.int64]
    """Each record's ``expires_at`` in epoch microseconds (:data:`NEVER_EXPIRES` for none)."""
    roles: npt.NDArray[np.str_]
    kinds: npt.NDArray[np.str_]
    vectors: Matrix | None
    """The unit vectors, shape ``(n, dimension)``, zero where :attr:`has_vector` is false;
    ``None`` while the store has no dimension."""
    has_vector: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.encoded)

    @classmethod
    def empty(cls, dimension: int | None) -> Rows:
        """No rows (of vectors of ``dimension``, if the store has one)."""
        return cls(
            encoded=[],
            ids=np.zeros((0, 16), dtype=np.uint8),
            created=np.zeros(0, dtype=np.int64),
            expires=np.zeros(0, dtype=np.int64),
            roles=np.zeros(0, dtype=np.str_),
            kinds=np.zeros(0, dtype=np.str_),
            vectors=None if dimension is None else np.zeros((0, dimension), dtype=np.float32),
            has_vector=np.zeros(0, dtype=bool),
        )


def _code(codes: dict[str, int], value: str) -> int:
    """The code of ``value``, new ones numbered in order. Process-wide and append-only, so codes
    never change meaning; a lock, because ``setdefault(v, len(codes))`` reads the length first, and
    two stores in two threads could give two new values one code (merging two sessions)."""
    code = codes.get(value)
    if code is None:
        with _CODES_LOCK:
            code = codes.setdefault(value, len(codes))
    return code


def session_code(session_id: str | None) -> int:
    """The process-wide code of a session id (:data:`_NO_SESSION` for none)."""
    return _NO_SESSION if session_id is None else _code(_SESSION_CODES, session_id)


def _compact(record: MemoryRecord) -> bytes:
    """``record``'s JSON without its scope and null fields (their default when decoded)."""
    return record.model_dump_json(exclude={"scope"}, exclude_none=True).encode()


def _without_scope(encoded: list[bytes], scope: Scope) -> list[bytes]:
    """Records' whole JSON (all of ``scope``) in the compact form rows keep.

    The JSON a partition exports puts the scope first, and ``model_dump_json`` second, after the
    id: both are cut without parsing. Any other layout is parsed and written again (the scope
    dropped is the one every row of the session is read back with).
    """
    scope_json = b'"scope":' + scope.model_dump_json().encode() + b","
    first = b"{" + scope_json
    compact = []
    for data in encoded:
        # A second "scope" key (which a later key would win as) sends the record to the parser.
        if data.startswith(first) and data.count(b'"scope":') == 1:
            compact.append(b"{" + data[len(first) :])
        elif data[45 : 45 + len(scope_json)] == scope_json and data.count(b'"scope":') == 1:
            compact.append(data[:45] + data[45 + len(scope_json) :])
        else:
            parsed = json.loads(data)
            parsed.pop("scope", None)
            compact.append(json.dumps(parsed, separators=(",", ":"), ensure_ascii=False).encode())
    return compact


def _names(field: str, codes: npt.NDArray[np.int32]) -> npt.NDArray[np.str_]:
    """The values of a keyword field's ``codes``."""
    names = np.array(list(_FIELD_CODES[field]) or [""], dtype=np.str_)  # codes number insertion order
    return names[codes]


def _known_session_code(session_id: str | None) -> int:
    """The code of ``session_id``, or a code no row has when no record ever had that session."""
    return _NO_SESSION if session_id is None else _SESSION_CODES.get(session_id, _NO_SESSION - 1)


class RecordCache:
    """The decoded records an index keeps, least recently used first out, by partition and row."""

    def __init__(self, size: int = DECODED_RECORDS) -> None:
        self.size = size
        self._records: OrderedDict[tuple[int, int], MemoryRecord] = OrderedDict()
        self._serials = itertools.count()

    def serial(self) -> int:
        """A number for a new partition, never given to another one by this cache."""
        return next(self._serials)

    def get(self, partition: int, row: int) -> MemoryRecord | None:
        record = self._records.get((partition, row))
        if record is not None:
            self._records.move_to_end((partition, row))
        return record

    def put(self, partition: int, row: int, record: MemoryRecord) -> None:
        self._records[(partition, row)] = record
        self._records.move_to_end((partition, row))
        if len(self._records) > self.size:
            self._records.popitem(last=False)

    def pop(self, partition: int, row: int) -> MemoryRecord | None:
        return self._records.pop((partition, row), None)


class Partition:
    """The records of one owner (tenant, user, agent), with parallel arrays for fast reads.

    Rows are found by record id (``UUID.int``) through :attr:`positions`; the same id may
    name one record in each of several of the owner's sessions.
    """

    def __init__(
        self,
        dimension: int,
        owner: tuple[str | None, str | None, str | None],
        cache: RecordCache,
        *,
        keywords: bool = True,
        blocks: BlockPool | None = None,
    ) -> None:
        self.dimension = dimension
        self.owner = owner
        """The (tenant, user, agent) of every row."""
        self.encoded: list[bytes] = []
        """Each row's record as JSON without its scope and null fields (:func:`_compact`)."""
        self.positions: dict[int, int | dict[int, int]] = {}
        """Record id -> its row, or, for an id in several sessions, session code -> row."""
        self.scopes: dict[int, Scope] = {}
        """Session code -> the scope of that session's rows."""
        self._scope_json: dict[int, bytes] = {}
        """Session code -> ``{"scope":<its JSON>,``, what a row's JSON is missing at its start."""
        self.vectors = VectorBlocks(dimension, blocks)
        self.has_vector = np.zeros(_INITIAL_CAPACITY, dtype=bool)
        self.timestamps = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self.expiries = np.full(_INITIAL_CAPACITY, _NEVER, dtype=np.int64)
        """Each row's ``expires_at`` in epoch microseconds (:data:`NEVER_EXPIRES` for none)."""
        self.expiring = 0
        """How many rows have an ``expires_at``: while none does, reads skip the expiry mask."""
        self.id_high = np.zeros(_INITIAL_CAPACITY, dtype=np.uint64)
        """The high 64 bits of each row's id (the low ones are :attr:`id_low`): ties in time order."""
        self.id_low = np.zeros(_INITIAL_CAPACITY, dtype=np.uint64)
        self.codes = {spec.name: np.zeros(_INITIAL_CAPACITY, dtype=np.int32) for spec in _CODED_FIELDS}
        """A code column per keyword field (:data:`_CODED_FIELDS`), by field name."""
        self.sessions = np.zeros(_INITIAL_CAPACITY, dtype=np.int32)
        self.metadata: dict[str, MetadataColumn] = {}
        """Typed columns of the metadata keys filters have tested, by key."""
        self.rows_in_time_order = True
        self._sorted_rows: npt.NDArray[np.intp] | None = None
        self._postings: Postings | None = Postings() if keywords else None
        self._cache = cache
        self._serial = cache.serial()

    @property
    def size(self) -> int:
        return len(self.encoded)

    def _reserve(self, needed: int) -> None:
        self.vectors.reserve(needed)
        capacity = len(self.timestamps)
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= 2
        for name in ("has_vector", "timestamps", "id_high", "id_low", "sessions"):
            setattr(self, name, np.resize(getattr(self, name), capacity))
        self.expiries = np.resize(self.expiries, capacity)
        self.expiries[self.size :] = _NEVER
        self.codes = {name: np.resize(column, capacity) for name, column in self.codes.items()}
        for column in self.metadata.values():
            column.reserve(capacity)

    def set_dimension(self, dimension: int, blocks: BlockPool) -> None:
        """Give a partition created before any vector existed its vector width, and the pool of
        its whole blocks (its placeholder rows had none: the index had no pool yet)."""
        if self.dimension != dimension:
            self.dimension = dimension
            self.vectors = VectorBlocks(dimension, blocks)
            self.vectors.reserve(len(self.timestamps))

    # -- finding rows ------------------------------------------------------------------------------

    def row_of(self, session: int, record_id: int) -> int | None:
        """The row of the record ``record_id`` in the session coded ``session``, if there is one."""
        found = self.positions.get(record_id)
        if found is None or isinstance(found, int):
            return found if found is not None and self.sessions[found] == session else None
        return found.get(session)

    def rows_of(self, record_id: int) -> list[int]:
        """The rows holding the id ``record_id`` (one per session that has it)."""
        found = self.positions.get(record_id)
        if found is None:
            return []
        return [found] if isinstance(found, int) else list(found.values())

    def _place(self, session: int, record_id: int, row: int) -> None:
        found = self.positions.get(record_id)
        if found is None:
            self.positions[record_id] = row
        elif isinstance(found, int):
            if self.sessions[found] == session:
                self.positions[record_id] = row
            else:
                self.positions[record_id] = {int(self.sessions[found]): found, session: row}
        else:
            found[session] = row

    def _unplace(self, session: int, record_id: int) -> None:
        found = self.positions[record_id]
        if isinstance(found, int):
            del self.positions[record_id]
            return
        del found[session]
        if len(found) == 1:
            self.positions[record_id] = next(iter(found.values()))

    # -- reading rows ------------------------------------------------------------------------------

    def record(self, row: int) -> MemoryRecord:
        """The record in ``row``, decoded from its JSON unless it is among the recently used.

        :raises StoreCorruptedError: if the JSON decodes to another id or scope than the row's
            (loaded rows are trusted not to, and this keeps a crafted file from crossing scopes).
        """
        record = self._cache.get(self._serial, row)
        if record is None:
            record = MemoryRecord.from_stored_json(self._json(row))
            if record.id.int != self._id(row) or record.scope != self.scope_of(row):
                raise StoreCorruptedError(
                    f"a stored record of scope {self.scope_of(row)} decodes as {record.id} of "
                    f"scope {record.scope}; restore the store from its logs or a backup"
                )
            self._cache.put(self._serial, row, record)
        return record

    def record_id(self, row: int) -> UUID:
        """The id of the record in ``row`` (without decoding it)."""
        return UUID(int=self._id(row))

    def _id(self, row: int) -> int:
        return (int(self.id_high[row]) << 64) | int(self.id_low[row])

    def scope_of(self, row: int) -> Scope:
        """The scope of the record in ``row``."""
        return self.scopes[int(self.sessions[row])]

    # -- writing rows ------------------------------------------------------------------------------

    def _json(self, row: int) -> bytes:
        """The whole JSON of the record in ``row``."""
        return self._scope_json[int(self.sessions[row])] + self.encoded[row][1:]

    def _add_scope(self, session: int, scope: Scope) -> None:
        if session not in self.scopes:
            self.scopes[session] = scope
            self._scope_json[session] = b'{"scope":' + scope.model_dump_json().encode() + b","

    def put(self, record: MemoryRecord, vector: Matrix | None) -> bool:
        """Insert or replace a record (and its unit vector); whether it was new."""
        stamp, key = epoch_micros(record.created_at), record.id.int
        high = key >> 64
        session = session_code(record.scope.session_id)
        row = self.row_of(session, key)
        new = row is None
        if row is None:
            row = self.size
            if row and (stamp, key) < (int(self.timestamps[row - 1]), self._id(row - 1)):
                self.rows_in_time_order = False
            self._reserve(row + 1)
            self.encoded.append(b"")
            self.sessions[row] = session
            self._place(session, key, row)
            self._add_scope(session, record.scope)
        else:
            if self._postings is not None:
                self._postings.discard(row, self.record(row).message.content)
            if stamp != self.timestamps[row]:
                self.rows_in_time_order = False
            self.expiring -= int(self.expiries[row] != _NEVER)
        self.encoded[row] = _compact(record)
        self._cache.put(self._serial, row, record)
        self._sorted_rows = None
        self.timestamps[row], self.id_high[row], self.id_low[row] = stamp, high, key & ID_LOW_BITS
        self.expiries[row] = epoch_micros(record.expires)
        self.expiring += int(self.expiries[row] != _NEVER)
        for spec in _CODED_FIELDS:
            value = str(spec.read(record, spec.name))
            self.codes[spec.name][row] = _code(_FIELD_CODES[spec.name], value)
        for name, column in self.metadata.items():
            column.set(row, record.metadata.get(name, MISSING))
        self.has_vector[row] = vector is not None
        self.vectors.set(row, vector)
        if self._postings is not None:
            self._postings.add(row, record.message.content)
        return new

    def load(self, scope: Scope, rows: Rows) -> list[int]:
        """Append the records of ``rows``, all of exactly ``scope``; return their ids (as ints).

        :raises StoreCorruptedError: if an id appears twice, or is stored in ``scope`` already
            (a row no id leads to could never be read or deleted by id).
        """
        start, count = self.size, len(rows)
        session = session_code(scope.session_id)
        ids = np.ascontiguousarray(rows.ids, dtype=np.uint8).reshape(count, 16)
        high = ids[:, :8].copy().view(">u8").ravel().astype(np.uint64)
        low = ids[:, 8:].copy().view(">u8").ravel().astype(np.uint64)
        numbers = [(h << 64) | lo for h, lo in zip(high.tolist(), low.tolist(), strict=True)]
        if len(set(numbers)) != count or any(self.row_of(session, n) is not None for n in numbers):
            raise StoreCorruptedError(f"the rows loaded into scope {scope} repeat a record id")
        if not count:
            return numbers
        self._reserve(start + count)
        stop = start + count
        self._add_scope(session, scope)
        self.encoded.extend(_without_scope(rows.encoded, scope))
        self.id_high[start:stop], self.id_low[start:stop] = high, low
        self.timestamps[start:stop] = rows.created
        self.expiries[start:stop] = rows.expires
        self.expiring += int(np.count_nonzero(rows.expires != _NEVER))
        self.sessions[start:stop] = session
        self._load_codes("role", rows.roles, start, stop)
        self._load_codes("kind", rows.kinds, start, stop)
        if rows.vectors is not None:
            self.vectors.set_rows(start, rows.vectors)
            self.has_vector[start:stop] = rows.has_vector
        else:
            self.has_vector[start:stop] = False
        for row, number in enumerate(numbers, start):
            self._place(session, number, row)
        for name, column in self.metadata.items():
            for row in range(start, stop):
                column.set(row, self._metadata_value(row, name))
        first = max(start - 1, 0)
        stamps = self.timestamps[first:stop]
        highs, lows = self.id_high[first:stop], self.id_low[first:stop]
        later = (highs[1:] > highs[:-1]) | ((highs[1:] == highs[:-1]) & (lows[1:] >= lows[:-1]))
        ordered = (stamps[1:] > stamps[:-1]) | ((stamps[1:] == stamps[:-1]) & later)
        if not ordered.all():
            self.rows_in_time_order = False
        self._sorted_rows = None
        if self._postings is not None:
            for row in range(start, stop):
                self._postings.add(row, self.record(row).message.content)
        return numbers

    def export(self, rows: npt.NDArray[np.intp], *, with_vectors: bool) -> Rows:
        """The records in ``rows`` as columns, without decoding them (their vectors only when
        ``with_vectors``: before a store has a dimension, partitions hold placeholder rows)."""
        ids = np.empty((len(rows), 16), dtype=np.uint8)
        ids[:, :8] = self.id_high[rows].astype(">u8").view(np.uint8).reshape(-1, 8)
        ids[:, 8:] = self.id_low[rows].astype(">u8").view(np.uint8).reshape(-1, 8)
        listed = rows.tolist()
        return Rows(
            encoded=[self._json(row) for row in listed],
            ids=ids,
            created=self.timestamps[rows].copy(),
            expires=self.expiries[rows].copy(),
            roles=_names("role", self.codes["role"][rows]),
            kinds=_names("kind", self.codes["kind"][rows]),
            vectors=self.vectors.take(rows) if with_vectors else None,
            has_vector=self.has_vector[rows].copy(),
        )

    def _load_codes(self, name: str, values: npt.NDArray[np.str_], start: int, stop: int) -> None:
        distinct, inverse = np.unique(values, return_inverse=True)
        table = np.array([_code(_FIELD_CODES[name], str(value)) for value in distinct], dtype=np.int32)
        self.codes[name][start:stop] = table[inverse.ravel()] if len(distinct) else 0

    def remove(self, session: int, record_id: int) -> None:
        """Swap-remove the record ``record_id`` of the session coded ``session``, keeping the arrays
        dense; the freed row is zeroed."""
        row = self.row_of(session, record_id)
        assert row is not None
        self._unplace(session, record_id)
        last = self.size - 1
        self.expiring -= int(self.expiries[row] != _NEVER)
        if self._postings is not None:
            self._postings.discard(row, self.record(row).message.content)
        self._cache.pop(self._serial, row)
        if row != last:
            if self._postings is not None:
                self._postings.move(last, row, self.record(last).message.content)
            moved = self._cache.pop(self._serial, last)
            if moved is not None:
                self._cache.put(self._serial, row, moved)
            self.encoded[row] = self.encoded[last]
            moved_id = self._id(last)
            moved_session = int(self.sessions[last])
            self.vectors.move(last, row)
            for array in (
                self.has_vector,
                self.timestamps,
                self.expiries,
                self.id_high,
                self.id_low,
                self.sessions,
                *self.codes.values(),
            ):
                array[row] = array[last]
            for column in self.metadata.values():
                column.move(last, row)
            self._unplace(moved_session, moved_id)
            self._place(moved_session, moved_id, row)
            self.rows_in_time_order = False
        else:
            for column in self.metadata.values():
                column.clear(row)
        self._sorted_rows = None
        self.encoded.pop()
        self.vectors.set(last, None)
        self.has_vector[last] = False
        self.expiries[last] = _NEVER

    # -- masks -------------------------------------------------------------------------------------

    def live_mask(self, now: int | None) -> npt.NDArray[np.bool_] | None:
        """The rows not expired at ``now`` (epoch microseconds); ``None`` when that is every row
        (or ``now`` is ``None``: no expiry condition)."""
        if now is None or not self.expiring:
            return None
        mask: npt.NDArray[np.bool_] = self.expiries[: self.size] > now
        return mask

    def is_live(self, row: int, now: int | None) -> bool:
        """Whether ``row`` is not expired at ``now`` (``None``: no expiry condition)."""
        return now is None or not self.expiring or bool(self.expiries[row] > now)

    def postings(self) -> Postings:
        """The keyword index of this partition's records, kept up to date from the first record on
        (:attr:`has_postings`); a partition loaded in bulk builds it here, on first use."""
        if self._postings is None:
            postings = Postings()
            for row in range(self.size):
                postings.add(row, self.record(row).message.content)
            self._postings = postings
        return self._postings

    @property
    def has_postings(self) -> bool:
        """Whether the keyword index exists (a search would not have to build it)."""
        return self._postings is not None

    def _time_sorted_rows(self) -> npt.NDArray[np.intp]:
        n = self.size
        if self.rows_in_time_order:
            return np.arange(n, dtype=np.intp)
        if self._sorted_rows is None:
            self._sorted_rows = np.lexsort((self.id_low[:n], self.id_high[:n], self.timestamps[:n]))
        return self._sorted_rows

    def rows_in_order(self, order: Order, after: int | None, before: int | None) -> npt.NDArray[np.intp]:
        """Row numbers sorted by (created_at, id), within the optional (exclusive) time bounds."""
        # Rows stored in time order (the common case: records arrive as they are made) are their own
        # order, so the bounds are found without gathering every timestamp.
        in_order = None if self.rows_in_time_order else self._time_sorted_rows()
        stamps = self.timestamps[: self.size] if in_order is None else self.timestamps[in_order]
        start = 0 if after is None else int(np.searchsorted(stamps, after, side="right"))
        stop = len(stamps) if before is None else int(np.searchsorted(stamps, before, side="left"))
        rows = np.arange(start, stop, dtype=np.intp) if in_order is None else in_order[start:stop]
        return rows[::-1] if order == "desc" else rows

    def session_mask(self, scope: Scope) -> npt.NDArray[np.bool_] | None:
        """The rows of ``scope``'s session; ``None`` when the scope names no session (all rows)."""
        if scope.session_id is None:
            return None
        mask: npt.NDArray[np.bool_] = self.sessions[: self.size] == _known_session_code(scope.session_id)
        return mask

    def exact_session_mask(self, session_id: str | None) -> npt.NDArray[np.bool_]:
        """The rows whose session is exactly ``session_id`` (``None``: rows without a session)."""
        mask: npt.NDArray[np.bool_] = self.sessions[: self.size] == _known_session_code(session_id)
        return mask

    def mask(self, node: Filter | None) -> npt.NDArray[np.bool_] | None:
        """The rows matching ``node`` as a mask; ``None`` if some comparison has no exact mask."""
        n = self.size
        if node is None:
            return np.ones(n, dtype=bool)
        if isinstance(node, Comparison):
            return self._comparison_mask(node)
        if isinstance(node, Not):
            inner = self.mask(node.clause)
            return None if inner is None else ~inner
        masks = [self.mask(clause) for clause in node.clauses]
        if any(m is None for m in masks):
            return None
        combine = np.logical_and if isinstance(node, And) else np.logical_or
        return combine.reduce([m for m in masks if m is not None])  # type: ignore[no-any-return]

    def _time_column(self, field: str) -> npt.NDArray[np.int64] | None:
        """The microsecond column of a time field (``created_at``, ``expires_at``), if it has one."""
        column = {"created_at": self.timestamps, "expires_at": self.expiries}.get(field)
        return None if column is None else column[: self.size]

    def _comparison_mask(self, node: Comparison) -> npt.NDArray[np.bool_] | None:
        if node.field.startswith(METADATA_PREFIX):
            return self.metadata_column(node.field[len(METADATA_PREFIX) :]).mask(
                node.op, node.value, self.size
            )
        micros = self._time_column(node.field)
        if micros is not None:
            compare = _TIME_COMPARISONS.get(node.op)
            if compare is None or not isinstance(node.value, datetime):
                return None
            return compare(micros, epoch_micros(node.value))  # type: ignore[no-any-return]
        codes = self.codes.get(node.field)
        if codes is None or node.op not in _MASKED_OPERATORS:
            return None
        n = self.size
        if node.op == "$exists":
            return np.full(n, bool(node.value))
        column = codes[:n]
        values = node.value if isinstance(node.value, tuple) else (node.value,)
        lookup = _FIELD_CODES[node.field]
        # A lookup table indexed by code: one gather, where np.isin would sort or compare per value;
        # this runs on every read (recall filters on role, and hybrid recall lists neighbours many times).
        # Every stored code was handed out before this read, so the table covers the column.
        table = np.zeros(len(lookup), dtype=bool)
        for value in values:
            code = lookup.get(str(value))
            if code is not None:  # a value no record has matches nothing
                table[code] = True
        matches: npt.NDArray[np.bool_] = table[column]
        return ~matches if node.op in ("$ne", "$nin") else matches

    def metadata_column(self, key: str) -> MetadataColumn:
        """The typed columns of metadata ``key``, built from the records the first time a filter asks."""
        column = self.metadata.get(key)
        if column is None:
            column = MetadataColumn(len(self.timestamps))
            for row in range(self.size):
                column.set(row, self._metadata_value(row, key))
            self.metadata[key] = column
        return column

    def _metadata_value(self, row: int, key: str) -> object:
        """The stored value of metadata ``key`` in ``row`` (from the JSON: a caller may have changed
        the metadata dict of a record a read returned)."""
        metadata = json.loads(self.encoded[row]).get("metadata") or {}
        return metadata.get(key, MISSING)


PartitionTest = Callable[["Partition"], bool]


def match_test(node: Filter | None) -> PartitionTest:
    """Whether a partition may hold a row matching ``node``: ``False`` only when metadata bounds
    or string codes rule every row out, so a read skips the partition without building a mask.
    Built once per read, so that the filter is taken apart once rather than per partition."""

    def on_column(key: str, op: str, value: object) -> PartitionTest:
        test = bounds_test(op, value)
        return lambda partition: test(partition.metadata_column(key))

    # No filter, or a negation (its clause ruling rows out rules them in): any partition may match.
    return _metadata_test(node, on_column, _any_partition)


def whole_test(node: Filter | None) -> PartitionTest:
    """Whether every row of a partition matches ``node``: ``True`` only when metadata bounds and
    counts prove it (:func:`~memcore.stores.metadata_columns.covers_test`), so a read takes the
    partition's rows without building the filter's mask. Built once per read, as :func:`match_test`."""

    def on_column(key: str, op: str, value: object) -> PartitionTest:
        test = covers_test(op, value)
        return lambda partition: test(partition.metadata_column(key), partition.size)

    # No filter (no mask to spare), or a negation: never proven whole.
    return _metadata_test(node, on_column, _no_partition)


def _metadata_test(
    node: Filter | None, on_column: Callable[[str, str, object], PartitionTest], otherwise: PartitionTest
) -> PartitionTest:
    """A partition test from ``on_column(key, op, value)`` for each metadata comparison of
    ``node``, combined as its ``$and`` and ``$or`` combine them; ``otherwise`` for anything else."""
    if isinstance(node, Comparison):
        if not node.field.startswith(METADATA_PREFIX):
            return otherwise
        return on_column(node.field[len(METADATA_PREFIX) :], node.op, node.value)
    if isinstance(node, And | Or):
        tests = [_metadata_test(clause, on_column, otherwise) for clause in node.clauses]
        combine = all if isinstance(node, And) else any
        return lambda partition: combine(test(partition) for test in tests)
    return otherwise


def _any_partition(partition: Partition) -> bool:
    return True


def _no_partition(partition: Partition) -> bool:
    return False
