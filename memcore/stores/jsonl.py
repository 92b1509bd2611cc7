"""``jsonl:///path``: a durable store in plain files, with exact search in memory.

Layout under the root folder (folders 0700, files 0600)::

    meta.json                       format, schema version, vector dimension
    .lock                           held (flock) by the one open store object
    scopes/<scope digest>/
        entries.jsonl               append-only puts and delete tombstones
        meta.json                   the scope, schema version, lines skipped at last open
        snapshot.bin                the live records up to a point of the log, in columns

Every write is fsynced before the call returns, so an acknowledged write
survives a killed process; a torn or corrupt line is skipped and counted, never
fatal (see :mod:`memcore.stores.jsonl_log`). On open, each scope's snapshot is
loaded and its log replayed past the point the snapshot covers (the whole log
when there is no valid snapshot) into a
:class:`~memcore.stores.scoped_index.ScopedIndex`, which answers every read.

The log is the source of truth, a snapshot only a checked accelerator (see
:mod:`memcore.stores.jsonl_snapshot`). A scope gets a new snapshot at
:meth:`close` once enough lines were written past its snapshot (see
:data:`SNAPSHOT_REWRITE_RATIO`), and at every compaction.

A batch is atomic per scope: the lines one :meth:`add` writes into one scope's
log become visible together or not at all. A batch spanning several scopes is
written scope by scope, so a crash can leave some scopes' part applied.

Deleted records stay in the logs as superseded lines until :meth:`compact`
(also :meth:`purge`) rewrites them, and the scope's snapshot with them; a log
whose dead lines outnumber its live records is compacted automatically once it
holds over 1,000 dead lines.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self
from uuid import UUID

import numpy as np

from memcore.errors import (
    InvalidInputError,
    MemcoreError,
    StoreCorruptedError,
    StoreError,
)
from memcore.filters import Filter
from memcore.locking import fsync_dir, lock_path, unlock
from memcore.model_base import STORED
from memcore.queries import KeywordQuery, ListQuery, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import Scope
from memcore.store import BaseStore, Capabilities, VectorSpace
from memcore.stores import jsonl_log, jsonl_snapshot
from memcore.stores.partition import Rows
from memcore.stores.scoped_index import RecordKey, ScopedIndex
from memcore.urls import DIMENSION, StoreURL
from memcore.validation import Matrix, check_dimension

FORMAT = "memcore-jsonl"
SCHEMA_VERSION = 1
AUTO_COMPACT_DEAD_LINES = 1_000
SNAPSHOT_MIN_LINES = 16
SNAPSHOT_REWRITE_RATIO = 32
"""At close, a scope gets a new snapshot once its log holds :data:`SNAPSHOT_MIN_LINES` lines past
its snapshot, and at least 1/``SNAPSHOT_REWRITE_RATIO`` of the lines the snapshot covers: fewer
replay about as fast as a snapshot loads, and rewriting a large snapshot for a few new lines
would make every close slow."""

logger = logging.getLogger(__name__)


@dataclass
class _ScopeLog:
    """Bookkeeping for one scope's log file."""

    scope: Scope
    folder: Path
    lines: int = 0
    """Lines in the log, corrupt ones included."""
    covered_lines: int = 0
    """Lines of the log that the scope's snapshot covers (0: no snapshot)."""
    dead_lines: int = 0
    needs_newline: bool = False
    skipped_lines: int = 0
    skipped_at_last_open: int = 0

    @property
    def entries(self) -> Path:
        return self.folder / "entries.jsonl"

    @property
    def snapshot(self) -> Path:
        return self.folder / jsonl_snapshot.SNAPSHOT_NAME


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise StoreCorruptedError(
            f"{path} is unreadable or not JSON ({exc}); restore it from a backup"
        ) from None
    if not isinstance(data, dict):
        raise StoreCorruptedError(f"{path} does not hold a JSON object")
    return data


class JsonlStore(BaseStore):
    """A durable store in JSON-lines files under one folder.

    One open store object per folder: a second one, in this process or another,
    gets :class:`~memcore.errors.StoreLockedError`. A lock left by a killed
    process is released by the operating system and does not block reopening.

    :param path: the root folder; created (mode 0700) if missing.
    :param dimension: fix the vector dimension of a new store up front.
    """

    name: ClassVar[str] = "jsonl"
    schemes: ClassVar[tuple[str, ...]] = ("jsonl",)
    capabilities: ClassVar[Capabilities] = Capabilities(
        durable=True, keyword_index=True, default_recall="hybrid", expiry=True
    )

    def __init__(self, path: str | os.PathLike[str], dimension: int | None = None) -> None:
        super().__init__()
        self.path = Path(path).expanduser()
        self._lock = threading.RLock()
        self._logs: dict[tuple[str | None, ...], _ScopeLog] = {}
        self._next_seq = 1
        self._space: VectorSpace | None = None
        check_dimension(dimension)
        try:
            if not self.path.exists():
                self.path.mkdir(mode=jsonl_log.DIR_MODE, parents=True)
                fsync_dir(self.path.parent)
            self._lock_fd = lock_path(
                self.path / ".lock",
                what=f"the jsonl store at {self.path}",
                advice="close the other store object or process first",
            )
        except OSError as exc:
            raise StoreError(f"cannot open the jsonl store at {self.path}: {exc}") from None
        try:
            stored_dimension = self._open_meta(dimension)
            self._index = ScopedIndex(stored_dimension)
            self._replay()
        except OSError as exc:
            unlock(self._lock_fd)
            raise StoreError(f"cannot open the jsonl store at {self.path}: {exc}") from None
        except BaseException:
            unlock(self._lock_fd)
            raise
        threading.Thread(target=self._build_keyword_index, name="memcore-jsonl-keywords", daemon=True).start()

    def _build_keyword_index(self) -> None:
        """Build the keyword index of the partitions snapshots loaded (which come without one), in
        the background and one partition at a time under the store's lock, so that no agent's first
        hybrid recall builds its own. Once the store is closed its index is empty, and this ends."""
        more = True
        while more:
            with self._lock:
                try:
                    more = self._index.build_keyword_index(1)
                except MemcoreError as exc:  # a record that does not decode: reads of it say so too
                    logger.warning("building the keyword index of %s stopped: %s", self.path, exc)
                    return

    url_params: ClassVar[frozenset[str]] = frozenset({DIMENSION})

    @classmethod
    def open_url(cls, url: StoreURL) -> Self:
        """Open ``jsonl:///absolute/path`` or ``jsonl://relative/path`` (``~`` expands; ``?dimension=``)."""
        return cls(url.location(), url.positive_int(DIMENSION))

    @property
    def dimension(self) -> int | None:
        return self._index.dimension

    # -- opening -----------------------------------------------------------------

    def _open_meta(self, dimension: int | None) -> int | None:
        meta_path = self.path / "meta.json"
        if not meta_path.exists():
            os.chmod(self.path, jsonl_log.DIR_MODE)
            jsonl_log.make_private_dir(self.path / "scopes")
            self._write_root_meta(dimension)
            return dimension
        meta = _read_json(meta_path)
        if meta.get("format") != FORMAT or meta.get("schema_version") != SCHEMA_VERSION:
            raise StoreCorruptedError(
                f"{meta_path} is not a {FORMAT} v{SCHEMA_VERSION} store "
                f"(format={meta.get('format')!r}, schema_version={meta.get('schema_version')!r})"
            )
        stored, embedder = meta.get("dimension"), meta.get("embedder")
        if stored is not None and (not isinstance(stored, int) or stored < 1):
            raise StoreCorruptedError(f"{meta_path} has an invalid dimension {stored!r}")
        if embedder is not None:
            if not isinstance(embedder, str) or stored is None:
                raise StoreCorruptedError(f"{meta_path} has an invalid embedder {embedder!r}")
            self._space = VectorSpace(embedder, stored)
        if dimension is not None and stored is not None and dimension != stored:
            raise InvalidInputError(f"the store at {self.path} has dimension {stored}, not {dimension}")
        if stored is None and dimension is not None:
            self._write_root_meta(dimension)
            return dimension
        return stored

    def _write_root_meta(self, dimension: int | None) -> None:
        meta = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "dimension": dimension,
            "embedder": None if self._space is None else self._space.embedder,
        }
        jsonl_log.write_atomically(self.path / "meta.json", json.dumps(meta).encode())

    def _load_vector_space(self) -> VectorSpace | None:
        with self._lock:
            return self._space

    def _save_vector_space(self, space: VectorSpace) -> None:
        with self._lock:
            previous, self._space = self._space, space
            try:
                self._write_root_meta(space.dimension)
            except BaseException:
                self._space = previous
                raise

    def _replay(self) -> None:
        # The last operation past the snapshot on each record, a record being its scope's log plus its id.
        latest: dict[tuple[str, UUID], tuple[jsonl_log.Operation, _ScopeLog]] = {}
        scopes_dir = self.path / "scopes"
        jsonl_log.remove_unfinished_dirs(scopes_dir)
        for folder in jsonl_log.iter_scope_dirs(scopes_dir):
            log = self._open_scope_log(folder)
            self._logs[log.scope.as_tuple()] = log
            start = self._load_snapshot(log)
            if log.entries.exists():
                result = jsonl_log.read_log(log.entries, start)
                log.needs_newline = not result.ends_with_newline
                log.skipped_lines += result.skipped_lines
                log.lines += len(result.operations) + result.skipped_lines
                for operation in result.operations:
                    self._next_seq = max(self._next_seq, operation.seq + 1)
                    key = (folder.name, operation.record_id)
                    previous = latest.get(key)
                    if previous is None or previous[0].seq < operation.seq:
                        latest[key] = (operation, log)
        self._load_index(latest.values())
        for log in self._logs.values():
            log.dead_lines = log.lines - self._index.scope_size(log.scope)
            if log.skipped_lines != log.skipped_at_last_open:
                self._write_scope_meta(log)

    def _load_snapshot(self, log: _ScopeLog) -> int:
        """Load the scope's snapshot if it is valid and of its log; the log offset to replay from."""
        log.snapshot.with_name(log.snapshot.name + ".tmp").unlink(missing_ok=True)
        try:
            rows, mark = jsonl_snapshot.read_snapshot(log.snapshot, log.scope, self._index.dimension)
            if not jsonl_snapshot.log_matches(log.entries, mark):
                raise jsonl_snapshot.SnapshotRejectedError("its log was rewritten or cut short since")
            if mark.offset == 0 and len(rows):
                raise jsonl_snapshot.SnapshotRejectedError("it holds records its log does not")
            self._index.load_rows(log.scope, rows)  # all or nothing; refuses a repeated id
        except FileNotFoundError:
            return 0
        except (OSError, jsonl_snapshot.SnapshotRejectedError, StoreCorruptedError) as exc:
            logger.warning("ignoring %s and replaying the whole log: %s", log.snapshot, exc)
            log.snapshot.unlink(missing_ok=True)
            return 0
        self._next_seq = max(self._next_seq, mark.next_seq)
        log.lines = log.covered_lines = mark.lines
        log.skipped_lines = mark.skipped
        return mark.offset

    def _open_scope_log(self, folder: Path) -> _ScopeLog:
        meta = _read_json(folder / "meta.json")
        try:
            scope = Scope.model_validate(meta["scope"], context=STORED)
            skipped = int(meta.get("skipped_lines", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCorruptedError(f"{folder / 'meta.json'} does not name a valid scope ({exc})") from None
        if scope.digest() != folder.name:
            raise StoreCorruptedError(
                f"{folder} holds the scope {scope}, whose folder would be {scope.digest()}"
            )
        log = _ScopeLog(scope, folder)
        log.skipped_at_last_open = skipped
        return log

    def _load_index(self, latest: Iterable[tuple[jsonl_log.Operation, _ScopeLog]]) -> None:
        """Apply the last operation on each record past the snapshots (which are loaded)."""
        records: list[MemoryRecord] = []
        vectors: list[Matrix | None] = []
        gone: list[RecordKey] = []
        for operation, log in latest:
            if operation.op == "del":
                gone.append((log.scope, operation.record_id))
                continue
            try:
                record = MemoryRecord.model_validate(operation.record)
            except MemcoreError:
                record = None
            if record is None or record.scope.as_tuple() != log.scope.as_tuple():
                # Unreadable, or a line that is not of its folder's scope (never written so):
                # it still supersedes what the snapshot holds under its id, as in a full replay.
                log.skipped_lines += 1
                gone.append((log.scope, operation.record_id))
                continue
            records.append(record)
            vectors.append(operation.vector)
        self._index.remove(gone)
        dimension = self._index.dimension or next((len(v) for v in vectors if v is not None), None)
        if dimension is None:
            self._index.upsert(records, None)
            return
        if any(v is not None and len(v) != dimension for v in vectors):
            raise StoreCorruptedError(
                f"the store at {self.path} holds vectors of a dimension other than {dimension}"
            )
        matrix = np.zeros((len(records), dimension), dtype=np.float32)
        has_vector = np.zeros(len(records), dtype=bool)
        for row, vector in enumerate(vectors):
            if vector is not None:
                matrix[row] = vector
                has_vector[row] = True
        self._index.upsert(records, matrix, has_vector)

    def _write_scope_meta(self, log: _ScopeLog) -> None:
        meta = {
            "schema_version": SCHEMA_VERSION,
            "scope": log.scope.model_dump(),
            "skipped_lines": log.skipped_lines,
        }
        jsonl_log.write_atomically(log.folder / "meta.json", json.dumps(meta).encode())
        log.skipped_at_last_open = log.skipped_lines

    # -- writing -----------------------------------------------------------------

    def _log_for(self, scope: Scope) -> _ScopeLog:
        log = self._logs.get(scope.as_tuple())
        if log is None:
            folder = self.path / "scopes" / scope.digest()
            meta = {"schema_version": SCHEMA_VERSION, "scope": scope.model_dump(), "skipped_lines": 0}
            try:
                jsonl_log.create_dir_atomically(folder, {"meta.json": json.dumps(meta).encode()})
            except OSError as exc:
                raise StoreError(
                    f"creating the folder of scope {scope} failed: {exc}; nothing was stored"
                ) from None
            log = _ScopeLog(scope, folder)
            self._logs[scope.as_tuple()] = log
        return log

    def _append(self, scope: Scope, lines: list[bytes], already_written: list[Scope]) -> None:
        """Append one scope's part of a batch; on failure, say which parts were already stored."""
        log = self._log_for(scope)
        try:
            jsonl_log.append_lines(log.entries, lines, needs_newline=log.needs_newline)
        except OSError as exc:
            done = "; ".join(str(s) for s in already_written)
            stored = f" The parts of scopes {done} were stored before the failure." if done else ""
            raise StoreError(
                f"writing to {log.entries} failed: {exc}; the records of scope {scope} were not stored."
                + stored
            ) from None
        log.needs_newline = False
        log.lines += len(lines)

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _add(self, records: list[MemoryRecord], vectors: Matrix | None) -> None:
        with self._lock:
            self._check_open()
            self._index.check_upsert(vectors)
            if vectors is not None and self._index.dimension is None:
                try:
                    self._write_root_meta(vectors.shape[1])
                except OSError as exc:
                    raise StoreError(
                        f"writing {self.path / 'meta.json'} failed: {exc}; nothing was stored"
                    ) from None
            by_scope: dict[tuple[str | None, ...], list[int]] = {}
            for row, record in enumerate(records):
                by_scope.setdefault(record.scope.as_tuple(), []).append(row)
            written: list[Scope] = []
            for rows in by_scope.values():
                batch, scope = uuid.uuid4().hex, records[rows[0]].scope
                vector_rows = None if vectors is None else vectors[rows]
                lines = [
                    jsonl_log.encode_put(
                        self._take_seq(),
                        batch,
                        len(rows),
                        records[row],
                        None if vector_rows is None else vector_rows[i],
                    )
                    for i, row in enumerate(rows)
                ]
                self._append(scope, lines, written)
                added = self._index.upsert([records[row] for row in rows], vector_rows)
                replaced = len(rows) - added
                self._logs[scope.as_tuple()].dead_lines += replaced
                written.append(scope)
            for scope in written:
                self._maybe_compact(scope)

    def _remove(self, keys: Iterable[RecordKey]) -> int:
        by_scope: dict[tuple[str | None, ...], list[UUID]] = {}
        scopes: dict[tuple[str | None, ...], Scope] = {}
        for scope, record_id in keys:
            by_scope.setdefault(scope.as_tuple(), []).append(record_id)
            scopes[scope.as_tuple()] = scope
        written: list[Scope] = []
        for key, record_ids in by_scope.items():
            batch = uuid.uuid4().hex
            lines = [jsonl_log.encode_delete(self._take_seq(), batch, len(record_ids), i) for i in record_ids]
            self._append(scopes[key], lines, written)
            self._index.remove([(scopes[key], record_id) for record_id in record_ids])
            self._logs[key].dead_lines += 2 * len(record_ids)
            written.append(scopes[key])
        for scope in written:
            self._maybe_compact(scope)
        return sum(len(record_ids) for record_ids in by_scope.values())

    def _delete(self, scope: Scope, ids: list[UUID]) -> int:
        with self._lock:
            self._check_open()
            return self._remove(self._index.visible_keys(scope, ids))

    def _delete_where(self, scope: Scope, node: Filter | None) -> int:
        with self._lock:
            self._check_open()
            return self._remove(self._index.matching_keys(scope, node))

    # -- compaction --------------------------------------------------------------

    def _maybe_compact(self, scope: Scope) -> None:
        """Compact a log that is mostly dead lines; best effort, after the write was acknowledged."""
        log = self._logs.get(scope.as_tuple())
        if log is None or log.dead_lines <= max(AUTO_COMPACT_DEAD_LINES, self._index.scope_size(scope)):
            return
        try:
            self._compact_scope(log)
        except OSError as exc:
            logger.warning(
                "automatic compaction of %s failed (%s); it is retried after later writes", log.folder, exc
            )

    def _compact_scope(self, log: _ScopeLog) -> None:
        """Rewrite the scope's log with its live records only, then its snapshot.

        In this order, a crash in between leaves a snapshot of the old log, which no
        longer matches the log and is ignored (and removed) at the next open.
        """
        rows = self._index.scope_rows(log.scope)
        if not len(rows):
            jsonl_log.remove_dir_atomically(log.folder)
            del self._logs[log.scope.as_tuple()]
            return
        batch, n, vectors = uuid.uuid4().hex, len(rows), rows.vectors
        lines = [
            jsonl_log.encode_put_json(
                self._take_seq(),
                batch,
                n,
                encoded,
                vectors[row] if vectors is not None and rows.has_vector[row] else None,
            )
            for row, encoded in enumerate(rows.encoded)
        ]
        jsonl_log.write_atomically(log.entries, b"".join(lines))
        log.lines, log.covered_lines = n, 0
        log.dead_lines = log.skipped_lines = 0
        log.needs_newline = False
        self._write_scope_meta(log)
        if n >= SNAPSHOT_MIN_LINES:
            self._write_snapshot(log, rows, durable=True)
        elif log.snapshot.exists():
            log.snapshot.unlink()
            fsync_dir(log.folder)

    def _write_snapshot(self, log: _ScopeLog, rows: Rows, *, durable: bool) -> None:
        mark = jsonl_snapshot.mark_log(
            log.entries,
            lines=log.lines,
            skipped=log.skipped_lines,
            next_seq=self._next_seq,
            torn_tail=log.needs_newline,
        )
        jsonl_snapshot.write_snapshot(log.snapshot, log.scope, rows, mark, durable=durable)
        log.covered_lines = mark.lines

    def _snapshot_on_close(self) -> None:
        """Snapshot each scope whose log grew enough past its snapshot; best effort."""
        for log in list(self._logs.values()):
            past = log.lines - log.covered_lines
            if past < SNAPSHOT_MIN_LINES or past * SNAPSHOT_REWRITE_RATIO < log.covered_lines:
                continue
            try:
                self._write_snapshot(log, self._index.scope_rows(log.scope), durable=False)
            except OSError as exc:
                logger.warning(
                    "writing the snapshot %s failed (%s); the log is replayed instead", log.snapshot, exc
                )

    def compact(self) -> None:
        """Rewrite every scope's log with only its live records.

        Deleted and superseded records, and skipped corrupt lines, are
        physically removed; a scope with no live record loses its folder.
        """
        with self._lock:
            self._check_open()
            try:
                for log in list(self._logs.values()):
                    self._compact_scope(log)
            except OSError as exc:
                raise StoreError(f"compacting {self.path} failed: {exc}") from None

    def _purge(self) -> None:
        """Physically erase deleted (and swept) records: :meth:`compact`."""
        self.compact()

    def skipped_lines(self) -> int:
        """How many corrupt or torn lines the last open skipped, over all scopes."""
        with self._lock:
            return sum(log.skipped_lines for log in self._logs.values())

    # -- reading -----------------------------------------------------------------

    def _get(self, scope: Scope, ids: list[UUID]) -> list[MemoryRecord]:
        with self._lock:
            self._check_open()
            return self._index.get(scope, ids, self._live_micros())

    def _vectors(self, scope: Scope, ids: list[UUID]) -> list[tuple[UUID, Matrix]]:
        with self._lock:
            self._check_open()
            return self._index.vectors(scope, ids, self._live_micros())

    def _list(self, scope: Scope, query: ListQuery) -> list[MemoryRecord]:
        with self._lock:
            self._check_open()
            return self._index.ordered(scope, query, self._live_micros())

    def _search(self, scope: Scope, query: SearchQuery) -> list[ScoredRecord]:
        with self._lock:
            self._check_open()
            return self._index.search(scope, query, self._live_micros())

    def _keyword_search(self, scope: Scope, query: KeywordQuery) -> list[ScoredRecord]:
        with self._lock:
            self._check_open()
            hits = self._index.keyword_search(scope, query, self._live_micros())
        return hits if hits is not None else super()._keyword_search(scope, query)

    def _count(self, scope: Scope, node: Filter | None) -> int:
        with self._lock:
            self._check_open()
            return self._index.count(scope, node, self._live_micros())

    def _replace(self, old: MemoryRecord, new: MemoryRecord, vector: Matrix | None) -> bool:
        with self._lock:  # check and write as one step: a delete or a write lands before or after both
            self._check_open()
            if self._index.get(old.scope.exact(), [old.id], self._live_micros()) != [old]:
                return False  # deleted, expired or changed since ``old`` was read
            self._add([new], vector)
            return True

    def _scopes(self, prefix: Scope) -> list[tuple[Scope, int]]:
        with self._lock:
            self._check_open()
            return self._index.scope_counts(prefix, self._live_micros())

    def _close(self) -> None:
        with self._lock:
            try:
                self._snapshot_on_close()
            finally:
                self._index = ScopedIndex(self._index.dimension)
                unlock(self._lock_fd)
