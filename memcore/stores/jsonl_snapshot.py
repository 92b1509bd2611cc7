"""Binary snapshots of the ``jsonl`` store's scopes: what makes reopening fast.

A scope's ``snapshot.bin`` holds its live records as of some point of its log,
in columns (:class:`~memcore.stores.partition.Rows`) that load with no
per-record decoding: the records' JSON in one blob plus an offsets array, the
ids, times, roles and kinds as arrays, and the vectors as one float32 matrix.
Opening a scope loads its snapshot and replays only the log past the point the
snapshot covers.

**The log stays the source of truth; a snapshot is a verified accelerator.**
Every record a snapshot holds is also in the log, so a snapshot that is
missing, torn, corrupt, stale or not of its folder's scope is ignored (and
removed) and the scope's whole log is replayed, exactly as without snapshots:
no snapshot can lose an acknowledged write or resurrect a deleted record, a
crash at any step of writing one leaves a valid store, and the log's crash and
torn-write guarantees are unchanged. The price is disk space (each record is
in both files) and a snapshot write at close. The alternative (a snapshot that
replaces the compacted log) would halve the space but make a corrupt snapshot
fatal, and the ordering of snapshot rename and log truncation a new crash hazard.

A snapshot names the log it was taken from by the log's length at that point,
the CRC-32 of the log's first and of its last :data:`WINDOW` bytes before that
point: appends keep it valid, and a rewritten log (compaction) or one cut
short invalidates it (each log batch carries a random id, so two logs never
share those windows by chance). A change between the windows (bit rot, an
edit by hand) goes unnoticed while the snapshot is valid: the snapshot's own
checked copy of those records is what loads.

File layout (little-endian)::

    magic (8 bytes) | header length (uint32) | CRC-32 of everything after these 16 bytes (uint32)
    header: JSON {format, version, scope digest, count, dimension, log mark, section table}
    sections, each at a 64-byte aligned offset: offsets (int64, count + 1), ids (uint8, count x 16),
    created, expires (int64), roles, kinds (fixed-width unicode), has_vector (bool),
    vectors (float32, count x dimension, if the store has a dimension), encoded (the JSON blob)

Besides the checksum and the digest, a load checks that every record's JSON
names the folder's exact scope, and no other, and holds its row's id, so a
crafted snapshot cannot put records of one scope into another.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memcore.locking import fsync_dir
from memcore.scope import Scope
from memcore.stores.jsonl_log import FILE_MODE
from memcore.stores.partition import Rows

SNAPSHOT_NAME = "snapshot.bin"
WINDOW = 4096
_MAGIC = b"MCJSNAP\x01"
_FORMAT = "memcore-jsonl-snapshot"
_VERSION = 1
_PREAMBLE = struct.Struct("<8sII")
_ALIGN = 64
_ID_KEY = b'"id":"'
_UUID_TEXT = 36
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_DIGIT_COLUMNS = np.array([i for i in range(_UUID_TEXT) if i not in (8, 13, 18, 23)])
"""Where the 32 hex digits of a UUID's text form are (the other 4 are dashes)."""


class SnapshotRejectedError(Exception):
    """A snapshot that cannot be used; the message says why. The log is replayed instead."""


@dataclass(frozen=True)
class LogMark:
    """How far into its scope's log a snapshot reaches, and how to recognise that log."""

    offset: int
    """Bytes of the log the snapshot covers."""
    lines: int
    """Lines in those bytes, corrupt ones included."""
    skipped: int
    """Corrupt or torn lines among them."""
    next_seq: int
    """The store's next sequence number when the snapshot was taken."""
    head_crc: int
    tail_crc: int


def _windows(fd: int, offset: int) -> tuple[int, int]:
    """The CRC-32 of the first and of the last :data:`WINDOW` bytes before ``offset``."""
    size = min(WINDOW, offset)
    return zlib.crc32(os.pread(fd, size, 0)), zlib.crc32(os.pread(fd, size, offset - size))


def mark_log(log: Path, *, lines: int, skipped: int, next_seq: int, torn_tail: bool) -> LogMark:
    """The mark of ``log`` as it is now; an absent log is empty.

    :param lines: the lines in the log, corrupt ones included.
    :param skipped: the corrupt or torn lines among them.
    :param torn_tail: whether the log ends in a line without its newline (a torn write). The
        mark then stops before that line, which the next append completes with a newline:
        replayed from there, it is one skipped line, as in a replay from the start.
    """
    try:
        fd = os.open(log, os.O_RDONLY)
    except FileNotFoundError:
        return LogMark(0, 0, 0, next_seq, 0, 0)
    try:
        offset = os.fstat(fd).st_size
        if torn_tail:
            offset = _after_last_newline(fd, offset)
            lines, skipped = lines - 1, skipped - 1
        head, tail = _windows(fd, offset)
    finally:
        os.close(fd)
    return LogMark(offset, lines, skipped, next_seq, head, tail)


def _after_last_newline(fd: int, end: int) -> int:
    """The offset just past the last newline before ``end`` (0 if there is none)."""
    while end > 0:
        start = max(0, end - 65_536)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def log_matches(log: Path, mark: LogMark) -> bool:
    """Whether ``log`` is the log ``mark`` was taken from (possibly with lines appended since)."""
    if mark.offset == 0:
        return True
    try:
        fd = os.open(log, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        return os.fstat(fd).st_size >= mark.offset and _windows(fd, mark.offset) == (
            mark.head_crc,
            mark.tail_crc,
        )
    finally:
        os.close(fd)


def _pad(length: int) -> int:
    return -length % _ALIGN


def _columns(rows: Rows) -> list[tuple[str, npt.NDArray[Any] | bytes]]:
    lengths = np.fromiter((len(e) for e in rows.encoded), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype="<i8")
    np.cumsum(lengths, out=offsets[1:])
    columns: list[tuple[str, npt.NDArray[Any] | bytes]] = [
        ("offsets", offsets),
        ("ids", np.ascontiguousarray(rows.ids, dtype=np.uint8)),
        ("created", np.ascontiguousarray(rows.created, dtype="<i8")),
        ("expires", np.ascontiguousarray(rows.expires, dtype="<i8")),
        ("roles", np.ascontiguousarray(rows.roles, dtype=np.str_)),
        ("kinds", np.ascontiguousarray(rows.kinds, dtype=np.str_)),
        ("has_vector", np.ascontiguousarray(rows.has_vector, dtype=bool)),
    ]
    if rows.vectors is not None:
        columns.append(("vectors", np.ascontiguousarray(rows.vectors, dtype="<f4")))
    columns.append(("encoded", b"".join(rows.encoded)))
    return columns


def write_snapshot(path: Path, scope: Scope, rows: Rows, mark: LogMark, *, durable: bool) -> None:
    """Write ``rows`` (all of exactly ``scope``) as the snapshot at ``path``, replacing any.

    Through a temporary file and a rename, so ``path`` is never half-written.

    :param durable: fsync the file and the folder before returning (compaction: the
        replaced snapshot must be gone for good); a snapshot at close need not be,
        since a lost or torn one is only ignored.
    """
    columns = _columns(rows)
    table: dict[str, list[Any]] = {}
    position = 0
    for name, column in columns:
        nbytes = len(column) if isinstance(column, bytes) else column.nbytes
        dtype = "bytes" if isinstance(column, bytes) else column.dtype.str
        table[name] = [position, nbytes, dtype]
        position += nbytes + _pad(nbytes)
    header = json.dumps(
        {
            "format": _FORMAT,
            "version": _VERSION,
            "scope": scope.digest(),
            "count": len(rows),
            "dimension": None if rows.vectors is None else int(rows.vectors.shape[1]),
            "log": asdict(mark),
            "sections": table,
        }
    ).encode()
    header += b" " * _pad(_PREAMBLE.size + len(header))
    parts: list[bytes | memoryview] = [header]
    for _, column in columns:
        data = column if isinstance(column, bytes) else column.reshape(-1).view(np.uint8).data
        parts += [data, b"\0" * _pad(len(data))]
    checksum = 0
    for part in parts:
        checksum = zlib.crc32(part, checksum)
    parts.insert(0, _PREAMBLE.pack(_MAGIC, len(header), checksum))
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        try:
            for part in parts:
                view = memoryview(part)
                while view:
                    view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)  # it may hold records a purge is erasing
        raise
    if durable:
        fsync_dir(path.parent)


def read_snapshot(path: Path, scope: Scope, dimension: int | None) -> tuple[Rows, LogMark]:
    """The rows and log mark of the snapshot at ``path``, checked to be intact and of ``scope``.

    :param dimension: the store's vector dimension; a snapshot of another one is rejected.
    :raises SnapshotRejectedError: if the snapshot is torn, corrupt, or not of ``scope``.
    :raises OSError: if it cannot be read (``FileNotFoundError`` if there is none).
    """
    data = path.read_bytes()
    if len(data) < _PREAMBLE.size:
        raise SnapshotRejectedError("it is truncated")
    magic, header_length, checksum = _PREAMBLE.unpack_from(data)
    if magic != _MAGIC:
        raise SnapshotRejectedError("it is not a snapshot of this version")
    if zlib.crc32(memoryview(data)[_PREAMBLE.size :]) != checksum:
        raise SnapshotRejectedError("its checksum does not match (torn or corrupt)")
    body = _PREAMBLE.size + header_length
    try:
        header = json.loads(data[_PREAMBLE.size : body])
        if header["format"] != _FORMAT or header["version"] != _VERSION:
            raise SnapshotRejectedError("it is of another format or version")
        if header["scope"] != scope.digest():
            raise SnapshotRejectedError(f"it is of the scope {header['scope']}, not of {scope.digest()}")
        if header["dimension"] not in (None, dimension):
            raise SnapshotRejectedError(f"its vectors have {header['dimension']} dimensions, not {dimension}")
        mark = LogMark(**header["log"])
        sections = _sections(data, body, header)
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotRejectedError(f"its header is malformed ({exc!r})") from None
    return _rows(sections, int(header["count"]), scope), mark


def _sections(data: bytes, body: int, header: dict[str, Any]) -> dict[str, Any]:
    """Each section of ``data`` as an array (read-only views, no copy) or bytes."""
    count = int(header["count"])
    dimension = header["dimension"]
    shapes: dict[str, tuple[int, ...]] = {
        "offsets": (count + 1,),
        "ids": (count, 16),
        "created": (count,),
        "expires": (count,),
        "roles": (count,),
        "kinds": (count,),
        "has_vector": (count,),
    }
    kinds = {"offsets": "i", "ids": "u", "created": "i", "expires": "i", "roles": "U", "kinds": "U"}
    kinds |= {"has_vector": "b", "vectors": "f"}
    if dimension is not None:
        shapes["vectors"] = (count, int(dimension))
    if set(header["sections"]) != {*shapes, "encoded"}:
        raise SnapshotRejectedError("its sections are not the expected ones")
    sections: dict[str, Any] = {}
    for name, (start, nbytes, dtype_text) in header["sections"].items():
        start, nbytes = body + int(start), int(nbytes)
        if start < body or start + nbytes > len(data):
            raise SnapshotRejectedError(f"its section {name} lies outside the file")
        if name == "encoded":
            sections[name] = data[start : start + nbytes]
            continue
        dtype = np.dtype(dtype_text)
        expected = math.prod(shapes[name])
        if dtype.kind != kinds[name] or dtype.itemsize * expected != nbytes:
            raise SnapshotRejectedError(f"its section {name} has the wrong type or size")
        sections[name] = np.frombuffer(data, dtype=dtype, count=expected, offset=start).reshape(shapes[name])
    return sections


def _uuid_texts(ids: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """The 36-character text form of each 16-byte id, as an ``(n, 36)`` array of ASCII bytes."""
    texts = np.full((len(ids), _UUID_TEXT), ord("-"), dtype=np.uint8)
    texts[:, _DIGIT_COLUMNS[0::2]] = _HEX[ids >> 4]
    texts[:, _DIGIT_COLUMNS[1::2]] = _HEX[ids & 15]
    return texts


def _rows(sections: dict[str, Any], count: int, scope: Scope) -> Rows:
    offsets: npt.NDArray[np.int64] = sections["offsets"]
    blob: bytes = sections["encoded"]
    if count and (offsets[0] != 0 or offsets[-1] != len(blob) or (offsets[1:] < offsets[:-1]).any()):
        raise SnapshotRejectedError("its record offsets are inconsistent")
    _check_scope_and_ids(blob, offsets, sections["ids"], scope)
    bounds = offsets.tolist()
    return Rows(
        encoded=[blob[start:stop] for start, stop in itertools.pairwise(bounds)],
        ids=sections["ids"],
        created=sections["created"],
        expires=sections["expires"],
        roles=sections["roles"],
        kinds=sections["kinds"],
        vectors=sections.get("vectors"),
        has_vector=sections["has_vector"],
    )


def _check_scope_and_ids(
    blob: bytes, offsets: npt.NDArray[np.int64], ids: npt.NDArray[np.uint8], scope: Scope
) -> None:
    """Vectorised, without decoding: every ``"scope":`` key in the records is followed by
    ``scope``'s JSON and there is one per record (a duplicate key would win when the JSON is
    decoded), and every record holds its row's id at the place the first record holds its own.

    Quotes inside JSON strings are escaped, so ``"scope":`` outside a key cannot occur; a record
    whose metadata has a key named ``scope`` makes the snapshot rejected (and the log replayed).
    The id sits at the same place in every record, since only the scope (the same in all)
    may precede it in the JSON of a record.
    """
    count = len(ids)
    if not count:
        return
    key = b'"scope":'
    if not blob.count(key) == blob.count(key + scope.model_dump_json().encode()) == count:
        raise SnapshotRejectedError(f"its records are not each of the scope {scope} exactly once")
    id_at = blob.find(_ID_KEY, 0, int(offsets[1]))
    width = len(_ID_KEY) + _UUID_TEXT + 1
    starts = offsets[:-1] + id_at
    if id_at < 0 or (offsets[1:] - starts < width).any():
        raise SnapshotRejectedError("a record is too short to be a record")
    # Row i of ``windows`` is the bytes of record i where its id should be: a strided view,
    # gathered per chunk of rows (a copy of chunk x width bytes), never an index array per byte.
    windows = np.lib.stride_tricks.as_strided(
        np.frombuffer(blob, dtype=np.uint8), (len(blob) - width + 1, width), (1, 1), writeable=False
    )
    prefix = np.frombuffer(_ID_KEY, dtype=np.uint8)
    id_start, id_stop = len(_ID_KEY), len(_ID_KEY) + _UUID_TEXT
    chunk = 262_144
    for first in range(0, count, chunk):
        found = windows[starts[first : first + chunk]]
        if not (
            (found[:, :id_start] == prefix).all()
            and (found[:, id_stop] == ord('"')).all()
            and np.array_equal(found[:, id_start:id_stop], _uuid_texts(ids[first : first + chunk]))
        ):
            raise SnapshotRejectedError("a record's id differs from its row's id")
