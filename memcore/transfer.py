"""Moving memories between stores: export to JSON lines, import from them, migrate directly.

An export is a JSON-lines stream: a header line, then one line per record::

    {"format": "memcore-export/1", "scope": {...} | null, "vector_space": {...} | null}
    {"record": {...MemoryRecord JSON...}, "vector": "<base64 of little-endian float32>" | null}

Vectors are written as the source store keeps them (unit length), bit for bit. An
import writes them as they are, unless an embedder is given that is not the one the
export's vectors come from: then every record is embedded again with it (its text, as
memories embed it). :func:`migrate` does both without a file and then reads every
record back from the destination to check it.

An import stays inside the scope the export's header declares and the scope it is
given: a line whose record lies outside either is refused with a
:class:`~memcore.errors.ScopeError` naming the line, never skipped or written. So are
vectors of another length than the header's (or the first vector's). Checked before
anything is written, :func:`check_entries` makes a whole file fail without writing
(``memcore import`` runs it first); an import that fails after writing part of its
records raises :class:`IncompleteImportError`, which says how many were stored.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import IO, Any

import numpy as np

from memcore.agent.blocks import embedding_text
from memcore.embedders.base import Embedder
from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    IncompleteImportError,
    InvalidInputError,
    InvalidRecordError,
    MemcoreError,
    ScopeError,
    StoreError,
)
from memcore.records import MemoryRecord, RecordKey
from memcore.scope import Scope
from memcore.store import Store, VectorSpace
from memcore.validation import Matrix, Vector, check_scope

FORMAT = "memcore-export/1"
_TICK = timedelta(microseconds=1)  # the resolution of created_at
_FIRST, _LAST = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)
BATCH = 500
"""Records read or written per store call."""

Entry = tuple[MemoryRecord, Matrix | None]
"""A record and its stored vector (``None`` for a record without one)."""

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each batch."""


def _no_progress(done: int, total: int) -> None:
    pass


@dataclass(frozen=True)
class Outcome:
    """What an import or migration wrote."""

    records: int
    with_vectors: int
    embedded_again: bool


def entries(store: Store, scope: Scope, batch: int = BATCH) -> Iterator[Entry]:
    """Every record ``scope`` sees in ``store`` with its vector, oldest first, ``batch`` per read.

    Pages by ``(created_at, id)``, the order of ``list``, so records that share a
    timestamp are neither skipped nor repeated between pages: a page that ends
    inside a group of equal timestamps is completed by reading that group whole.
    """
    scope = check_scope(scope)
    after: datetime | None = None
    while True:
        page = store.list(scope, order="asc", limit=batch, after=after)
        if not page:
            return
        full, last = len(page) == batch, page[-1].created_at
        if full:
            # The next page starts after ``last``: finish ``last``'s group of equal timestamps here.
            # (At the ends of time there is nothing beyond ``last`` to bound the group with.)
            page = [r for r in page if r.created_at < last] + store.list(
                scope,
                order="asc",
                after=last - _TICK if last > _FIRST else None,
                before=last + _TICK if last < _LAST else None,
            )
        yield from _with_vectors(store, page)
        if not full:
            return
        after = last


def _with_vectors(store: Store, records: list[MemoryRecord]) -> Iterator[Entry]:
    for start in range(0, len(records), BATCH):
        chunk = records[start : start + BATCH]
        vectors = vectors_of(store, chunk)
        for record in chunk:
            yield record, vectors.get(record.key)


def vectors_of(store: Store, records: Sequence[MemoryRecord]) -> dict[RecordKey, Matrix]:
    """The stored vectors of ``records``, by scope and id: one read per exact scope of the batch.

    Never one read through a wider scope: another scope in it may hold a record of the same id
    (with a vector where this record has none), and a read keyed by id alone would hand that
    scope's vector to this record.
    """
    by_scope: dict[tuple[str | None, ...], list[MemoryRecord]] = {}
    for record in records:
        by_scope.setdefault(record.scope.as_tuple(), []).append(record)
    found: dict[RecordKey, Matrix] = {}
    for key, group in by_scope.items():
        vectors = store.vectors(group[0].scope.exact(), [record.id for record in group])
        found.update(((key, record_id), vector) for record_id, vector in vectors.items())
    return found


def export(store: Store, scope: Scope, out: IO[str], progress: Progress = _no_progress) -> int:
    """Write what ``scope`` sees in ``store`` to ``out`` as JSON lines; return how many records.

    :param scope: a scope, or :meth:`Scope.everything` for the whole store.
    """
    total = store.count(scope)
    header = {
        "format": FORMAT,
        "scope": None if scope.is_everything else scope.model_dump(exclude_none=True),
        "vector_space": _as_json(store.vector_space()),
    }
    out.write(json.dumps(header) + "\n")
    written = 0
    for record, vector in entries(store, scope):
        line = {"record": json.loads(record.model_dump_json()), "vector": _encode(vector)}
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
        written += 1
        if written % BATCH == 0:
            progress(written, total)
    progress(written, max(total, written))
    return written


def read_export(lines: Iterable[str]) -> tuple[VectorSpace | None, Iterator[Entry]]:
    """The vector space an export's vectors come from, and its entries (read lazily).

    :raises InvalidInputError: if the first line is not a memcore export header, or
        (while iterating) a line is not a record line, or holds a vector of another length
        than the header's vector space (or, without one, than the first vector).
    :raises ScopeError: (while iterating) for a record outside the scope the header declares.
    """
    stream = iter(lines)
    header = _json_line(next(stream, ""), 1)
    if header.get("format") != FORMAT:
        raise InvalidInputError(
            f"not a memcore export (format {header.get('format')!r}, expected {FORMAT!r})"
        )
    space = _space(header.get("vector_space"))
    return space, _entries(stream, _declared_scope(header.get("scope")), space)


def check_entries(source: Iterable[Entry], *, scope: Scope | None = None) -> int:
    """Read every entry as :func:`import_entries` would, writing nothing; return how many.

    Run over a file before importing it, so that a line the import would refuse fails the
    whole file before any record is written.

    :raises ScopeError: for a record outside ``scope`` (or the scope the export declares).
    :raises InvalidInputError: for a malformed line.
    """
    checked = 0
    for _ in _admitted(source, scope):
        checked += 1
    return checked


def import_entries(
    store: Store,
    space: VectorSpace | None,
    source: Iterable[Entry],
    *,
    scope: Scope | None = None,
    embedder: Embedder | None = None,
    total: int = 0,
    progress: Progress = _no_progress,
) -> Outcome:
    """Write exported entries into ``store``; records already there (same id) are replaced.

    :param space: the embedder the entries' vectors come from.
    :param scope: the scope the import stays in: a record outside it is refused.
    :param embedder: embed every record again with it, unless it is the one of ``space``.
    :raises EmbedderMismatchError: if ``store`` holds another embedder's vectors and
        no ``embedder`` of that kind was given to embed the records again.
    :raises ScopeError: for a record outside ``scope``, before its batch is written.
    :raises IncompleteImportError: if anything fails once records were stored; it says how many.
    """
    reembed = embedder is not None and (space is None or embedder.name != space.embedder)
    bound = store.vector_space()
    if reembed:
        assert embedder is not None
        store.bind_vector_space(VectorSpace(embedder.name, embedder.dim))
    elif space is not None:
        if bound is not None and bound != space:
            raise EmbedderMismatchError(
                f"the destination holds vectors of {bound.embedder} ({bound.dimension}-d), the export "
                f"{space.embedder} ({space.dimension}-d): pass the destination's embedder to embed again"
            )
        store.bind_vector_space(space)
    records = with_vectors = stored = 0
    batch: list[Entry] = []

    def flush() -> None:
        nonlocal with_vectors, stored
        if reembed:
            assert embedder is not None
            # Records stored without a vector (plain history) stay without one.
            vectored = [record for record, vector in batch if vector is not None]
            embedded = embedder.embed([embedding_text(record.message) for record in vectored])
            batch[:] = [(r, v) for r, v in batch if v is None] + list(zip(vectored, embedded, strict=True))
        elif space is None and bound is not None and any(vector is not None for _, vector in batch):
            raise EmbedderMismatchError(
                f"the export does not say which embedder its vectors come from, and the destination holds "
                f"vectors of {bound.embedder}: pass that embedder to embed the records again"
            )
        # Two calls (with and without vectors), each counted once it returned.
        for part in ([e for e in batch if e[1] is not None], [e for e in batch if e[1] is None]):
            add_entries(store, part)
            stored += len(part)
        with_vectors += sum(vector is not None for _, vector in batch)
        batch.clear()

    try:
        for record, vector in _admitted(source, scope):
            batch.append((record, vector))
            records += 1
            if len(batch) == BATCH:
                flush()
                progress(records, max(total, records))
        if batch:
            flush()
    except MemcoreError as exc:
        if stored:
            raise IncompleteImportError(stored, exc) from exc
        raise
    progress(records, max(total, records))
    return Outcome(records, with_vectors, reembed)


def _admitted(source: Iterable[Entry], scope: Scope | None) -> Iterator[Entry]:
    """``source``, refusing a record outside ``scope`` and a vector of another length than the first."""
    dimension: int | None = None
    for number, (record, vector) in enumerate(source, start=1):
        if scope is not None and not scope.matches(record.scope):
            raise ScopeError(
                f"record {number} of the import ({record.id}) belongs to {record.scope}, outside the "
                f"import's scope {scope}: nothing outside it is imported"
            )
        if vector is not None:
            dimension = dimension or len(vector)
            if len(vector) != dimension:
                raise DimensionMismatchError(
                    f"record {number} of the import ({record.id}) has a {len(vector)}-dimensional "
                    f"vector, the records before it {dimension}"
                )
        yield record, vector


def migrate(
    source: Store,
    destination: Store,
    scope: Scope,
    *,
    embedder: Embedder | None = None,
    progress: Progress = _no_progress,
) -> Outcome:
    """Copy what ``scope`` sees from ``source`` into ``destination``, then check every record.

    Each record is read back from the destination and compared with the source's;
    so is each vector (unless embedded again).

    :raises StoreError: if a record is missing or differs after the copy.
    """
    total = source.count(scope)
    expiring: list[datetime] = []  # when each copied record that can expire does

    def copying() -> Iterator[Entry]:
        for record, vector in entries(source, scope):
            if record.expires_at is not None:
                expiring.append(record.expires_at)
            yield record, vector

    outcome = import_entries(
        destination, source.vector_space(), copying(), embedder=embedder, total=total, progress=progress
    )
    checked = 0
    for page in _pages(entries(source, scope), BATCH):
        records = [record for record, _ in page]
        copied = destination.get(Scope.everything(), [record.id for record in records])
        copies = {copy.key: copy for copy in copied}
        vectors = vectors_of(destination, records)
        for record, vector in page:
            key = record.key
            if copies.get(key) != record:
                if not record.is_live(destination.now()):
                    continue  # expired during the copy: the destination rightly hides it
                raise StoreError(
                    f"record {record.id} is missing or differs in the destination after the copy"
                )
            if not outcome.embedded_again and not _same_vector(vector, vectors.get(key)):
                raise StoreError(
                    f"the vector of record {record.id} differs in the destination after the copy"
                )
        checked += len(page)
    # Records that expired in the source during the copy are rightly not read again.
    expired = sum(1 for moment in expiring if moment <= source.now())
    if checked + expired != outcome.records:
        raise StoreError(f"copied {outcome.records} records but found {checked} in the source afterwards")
    return outcome


def add_entries(store: Store, batch: Sequence[tuple[MemoryRecord, Vector | None]]) -> None:
    """``add`` records as they were stored: those with vectors in one call, those without in another."""
    vectored = [(record, vector) for record, vector in batch if vector is not None]
    plain = [record for record, vector in batch if vector is None]
    if len({len(vector) for _, vector in vectored}) > 1:
        raise DimensionMismatchError(
            f"vectors of {len({len(v) for _, v in vectored})} lengths in one batch; a store holds one"
        )
    if vectored:
        store.add(
            [record for record, _ in vectored],
            np.stack([np.asarray(v, dtype=np.float32) for _, v in vectored]),
        )
    if plain:
        store.add(plain)


def _same_vector(a: Matrix | None, b: Matrix | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.allclose(a, b, atol=1e-6))


def _pages(source: Iterable[Entry], size: int) -> Iterator[list[Entry]]:
    page: list[Entry] = []
    for entry in source:
        page.append(entry)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


def _entries(lines: Iterator[str], declared: Scope | None, space: VectorSpace | None) -> Iterator[Entry]:
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        data = _json_line(line, number)
        if "record" not in data:
            raise InvalidInputError(f"line {number} of the export is not a record line")
        try:
            record = MemoryRecord.model_validate(data["record"])
        except MemcoreError as exc:
            raise type(exc)(f"line {number} of the export: {exc}") from None
        except (OverflowError, RecursionError) as exc:  # times at the ends of the calendar, deep JSON
            raise InvalidRecordError(f"line {number} of the export holds an invalid record: {exc}") from None
        if declared is not None and not declared.matches(record.scope):
            raise ScopeError(
                f"line {number} of the export: record {record.id} belongs to {record.scope}, outside "
                f"the scope the export declares ({declared}): nothing outside it is imported"
            )
        vector = _decode(data.get("vector"), number)
        if vector is not None and space is not None and len(vector) != space.dimension:
            raise DimensionMismatchError(
                f"line {number} of the export has a {len(vector)}-dimensional vector; its header "
                f"says {space.dimension}"
            )
        yield record, vector


def _declared_scope(data: object) -> Scope | None:
    """The scope an export's header declares (``None``: the whole store)."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InvalidInputError(f"the export header's scope is malformed: {data!r}")
    try:
        return Scope.model_validate(data)
    except MemcoreError as exc:
        raise ScopeError(f"the export header's scope is invalid: {exc}") from None


def _json_line(line: str, number: int) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"line {number} of the export is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"line {number} of the export is not a JSON object")
    return data


def _encode(vector: Matrix | None) -> str | None:
    return None if vector is None else base64.b64encode(vector.astype("<f4").tobytes()).decode()


def _decode(text: object, number: int) -> Matrix | None:
    if text is None:
        return None
    try:
        raw = base64.b64decode(str(text), validate=True)
    except ValueError:
        raise InvalidInputError(f"line {number} of the export has a vector that is not base64") from None
    if not raw or len(raw) % 4:
        raise InvalidInputError(f"line {number} of the export has a vector of {len(raw)} bytes")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def _as_json(space: VectorSpace | None) -> dict[str, Any] | None:
    return None if space is None else dataclasses.asdict(space)


def _space(data: object) -> VectorSpace | None:
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("embedder"), str):
        raise InvalidInputError(f"the export header's vector_space is malformed: {data!r}")
    dimension = data.get("dimension")
    if not isinstance(dimension, int) or isinstance(dimension, bool) or dimension < 1:
        raise InvalidInputError(f"the export header's vector_space has a bad dimension: {dimension!r}")
    return VectorSpace(data["embedder"], dimension)
