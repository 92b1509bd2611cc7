"""The on-disk format of the ``jsonl`` store: checksummed, batched JSON lines.

Each scope has one append-only ``entries.jsonl``. Every line is a JSON object
that ends with its own CRC-32::

    {"op":"put","seq":7,"batch":"9f..","n":2,"vector":"<base64 float32>","record":{...},"crc":"1a2b3c4d"}
    {"op":"del","seq":9,"batch":"a0..","n":1,"id":"<uuid>","crc":"..."}

``crc`` covers the line's bytes before ``,"crc"``. ``seq`` orders operations
across files (the highest wins per id). The lines one call writes to one file
share a ``batch`` id and carry the batch's line count ``n``: a batch is applied
only when all ``n`` lines are intact, so a write torn by a crash is invisible
rather than half-visible. Vectors are little-endian float32 bytes in base64,
a quarter of the size of a JSON list of floats and far faster to read back.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import numpy as np

from memcore.locking import fsync_dir
from memcore.records import MemoryRecord
from memcore.validation import Matrix

FILE_MODE = 0o600
DIR_MODE = 0o700
_CRC_SUFFIX_LEN = len(',"crc":"00000000"}\n')


@dataclass(frozen=True, slots=True)
class Operation:
    """One decoded line: a put (record JSON and vector) or a delete."""

    op: Literal["put", "del"]
    seq: int
    record_id: UUID
    record: dict[str, Any] | None = None
    vector: Matrix | None = None


@dataclass
class LogReadResult:
    """What reading one log file found."""

    operations: list[Operation]
    skipped_lines: int
    ends_with_newline: bool


def _seal(body: bytes) -> bytes:
    """Append the CRC of ``body`` (a JSON object without its closing brace) and a newline."""
    return body + b',"crc":"%08x"}\n' % zlib.crc32(body)


def encode_put(seq: int, batch: str, n: int, record: MemoryRecord, vector: Matrix | None) -> bytes:
    """The line that stores ``record`` (and its vector)."""
    return encode_put_json(seq, batch, n, record.model_dump_json().encode(), vector)


def encode_put_json(seq: int, batch: str, n: int, record_json: bytes, vector: Matrix | None) -> bytes:
    """The line that stores the record whose JSON (as ``model_dump_json`` writes it) is ``record_json``."""
    encoded = b"null"
    if vector is not None:
        encoded = b'"' + base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()) + b'"'
    return _seal(
        b'{"op":"put","seq":%d,"batch":"%s","n":%d,"vector":%s,"record":%s'
        % (seq, batch.encode(), n, encoded, record_json)
    )


def encode_delete(seq: int, batch: str, n: int, record_id: UUID) -> bytes:
    """The tombstone line that deletes ``record_id``."""
    return _seal(f'{{"op":"del","seq":{seq},"batch":"{batch}","n":{n},"id":"{record_id}"'.encode())


def _decode(line: bytes) -> tuple[str, int, Operation] | None:
    """``(batch, n, operation)`` for an intact line, ``None`` for a corrupt one."""
    if len(line) < _CRC_SUFFIX_LEN or not line.endswith(b'"}\n'):
        return None
    body, suffix = line[:-_CRC_SUFFIX_LEN], line[-_CRC_SUFFIX_LEN:]
    if not suffix.startswith(b',"crc":"'):
        return None
    try:
        if int(suffix[8:16], 16) != zlib.crc32(body):
            return None
        data = json.loads((body + b"}").decode())
        batch, n, seq = str(data["batch"]), int(data["n"]), int(data["seq"])
        if data["op"] == "del":
            return batch, n, Operation("del", seq, UUID(data["id"]))
        record = data["record"]
        vector = None
        if data["vector"] is not None:
            vector = np.frombuffer(base64.b64decode(data["vector"]), dtype="<f4").astype(np.float32)
        return batch, n, Operation("put", seq, UUID(record["id"]), record, vector)
    except (ValueError, KeyError, TypeError):
        return None


def read_log(path: Path, start: int = 0) -> LogReadResult:
    """Every operation of complete, intact batches in ``path`` from byte ``start`` on; count what is skipped.

    Corrupt lines (bad checksum, torn, garbage) and the lines of incomplete
    batches are skipped and counted, never fatal.

    :param start: where to begin (a line boundary: where a snapshot stopped).
    """
    operations: list[Operation] = []
    skipped = 0
    pending: list[Operation] = []
    pending_batch, pending_n = "", 0
    with open(path, "rb") as handle:
        last_byte = b"\n"
        if start:
            handle.seek(start - 1)
            last_byte = handle.read(1)
        for line in handle:
            last_byte = line[-1:]
            decoded = _decode(line)
            if decoded is None:
                skipped += 1
                continue
            batch, n, operation = decoded
            if batch != pending_batch:
                skipped += len(pending)
                pending, pending_batch, pending_n = [], batch, n
            pending.append(operation)
            if len(pending) == pending_n:
                operations.extend(pending)
                pending, pending_batch = [], ""
    skipped += len(pending)
    return LogReadResult(operations, skipped, last_byte == b"\n")


def append_lines(path: Path, lines: list[bytes], *, needs_newline: bool) -> None:
    """Append ``lines`` and fsync; on failure, cut the file back to where it was.

    :param needs_newline: whether the file ends in a torn line that must be
        terminated first, so the new lines do not fuse with it.
    """
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            payload = (b"\n" if needs_newline else b"") + b"".join(lines)
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the folder."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_dir(path.parent)


def make_private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) if missing, and make its creation durable."""
    if path.is_dir():
        return
    path.mkdir(mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    fsync_dir(path.parent)


def iter_scope_dirs(scopes_dir: Path) -> Iterator[Path]:
    """The scope folders under ``scopes_dir``, in a stable order (not unfinished ones)."""
    if scopes_dir.is_dir():
        yield from sorted(p for p in scopes_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def create_dir_atomically(folder: Path, files: dict[str, bytes]) -> None:
    """Create ``folder`` (0700) holding ``files``, all or nothing.

    The folder is built under a hidden temporary name and renamed into place,
    so a crash never leaves a half-made folder under the real name.
    """
    staging = folder.with_name(f".new-{folder.name}-{uuid.uuid4().hex[:8]}")
    staging.mkdir(mode=DIR_MODE)
    try:
        for name, data in files.items():
            write_atomically(staging / name, data)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(folder.parent)


def remove_dir_atomically(folder: Path) -> None:
    """Remove ``folder`` so that a crash leaves it either whole or gone.

    It is first renamed to a hidden name (atomic), then deleted; a leftover
    hidden folder is removed by :func:`remove_unfinished_dirs` on the next open.
    """
    doomed = folder.with_name(f".trash-{folder.name}-{uuid.uuid4().hex[:8]}")
    os.rename(folder, doomed)
    fsync_dir(folder.parent)
    shutil.rmtree(doomed)


def remove_unfinished_dirs(scopes_dir: Path) -> None:
    """Delete the hidden folders a crash left in the middle of creating or removing a scope."""
    if scopes_dir.is_dir():
        for leftover in scopes_dir.iterdir():
            if leftover.is_dir() and leftover.name.startswith("."):
                shutil.rmtree(leftover)
