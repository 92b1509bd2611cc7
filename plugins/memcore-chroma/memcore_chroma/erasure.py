"""Erase what embedded Chroma leaves on disk after deletes.

Chroma keeps a deleted record's vector in the HNSW files of its collection
(chroma-core/chroma#7662, also after ``chroma vacuum``) and leaves a deleted
collection's index folder behind (#5259). After the store has rebuilt its
collection without the deleted records, this drops the index folders that no
segment references any more and compacts the SQLite file, whose free pages
would otherwise still hold the deleted documents and log entries.

Chroma also writes parts of its HNSW buffers that no element owns: a new index's
whole initial capacity, and the lengths of slots past the last element, straight
from ``malloc``. Those bytes are whatever the process freed before, deleted
records' documents and ids among them. After the index has been rebuilt,
:func:`scrub_vector_indexes` zeroes them.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import struct
from contextlib import closing
from pathlib import Path

from memcore.errors import StoreError

SQLITE_FILE = "chroma.sqlite3"

# hnswlib's header.bin starts: format version, offsetLevel0, capacity, element count, element size, ...
_HEADER = struct.Struct("<i6Q")
_HEADER_VERSION = 1
_LENGTH_SIZE = 4  # one uint32 per slot in length.bin
_SEGMENT_FOLDER = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def compact_persist_directory(path: Path) -> None:
    """Remove unreferenced segment folders under ``path`` and ``VACUUM`` its SQLite file.

    Call it only while holding the path's lock (no other process uses it).

    :raises StoreError: if the database or a folder cannot be read or removed.
    """
    try:
        with closing(sqlite3.connect(path / SQLITE_FILE, timeout=30)) as database:
            referenced = {row[0] for row in database.execute("SELECT id FROM segments")}
            with database:
                drop_index_samples(database)
            database.execute("VACUUM")
        for folder in path.iterdir():
            if folder.is_dir() and _SEGMENT_FOLDER.fullmatch(folder.name) and folder.name not in referenced:
                shutil.rmtree(folder)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"compacting the Chroma files under {path} failed: {exc}") from None


def drop_index_samples(database: sqlite3.Connection) -> None:
    """Empty ``sqlite_stat4`` if the file has one: a SQLite built with STAT4 samples whole index
    keys into it at ``ANALYZE`` (documents, entry ids, deleted ones among them once deleted)."""
    if database.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat4'").fetchone():
        database.execute("DELETE FROM sqlite_stat4")


def scrub_vector_indexes(path: Path) -> None:
    """Zero what Chroma's HNSW files under ``path`` hold past their last element.

    Call it while no client has ``path`` open: Chroma rewrites the files it holds.

    :raises StoreError: if an index's header is not the layout this knows (a newer
        chromadb): the purge cannot then vouch for those files.
    """
    for header in sorted(path.glob("*/header.bin")):
        try:
            _scrub_index(header.parent)
        except OSError as exc:
            raise StoreError(f"scrubbing the Chroma index in {header.parent} failed: {exc}") from None


def _scrub_index(folder: Path) -> None:
    raw = (folder / "header.bin").read_bytes()
    if len(raw) < _HEADER.size:
        raise StoreError(f"the Chroma index header in {folder} is too short to read ({len(raw)} bytes)")
    version, _, capacity, elements, element_size, *_ = _HEADER.unpack_from(raw)
    if version != _HEADER_VERSION or elements > capacity or element_size == 0:
        raise StoreError(
            f"the Chroma index header in {folder} is not the layout memcore knows (version {version}, "
            f"{elements} of {capacity} elements of {element_size} bytes): cannot clear its spare slots"
        )
    _zero_from(folder / "data_level0.bin", elements * element_size)
    _zero_from(folder / "length.bin", elements * _LENGTH_SIZE)


def _zero_from(file: Path, offset: int) -> None:
    """Overwrite ``file`` with zeros from ``offset`` to its end, durably."""
    size = file.stat().st_size
    if size <= offset:
        return
    with open(file, "r+b") as handle:
        handle.seek(offset)
        handle.write(bytes(size - offset))
        handle.flush()
        os.fsync(handle.fileno())


def scrub_server_folder(path: Path) -> None:
    """Erase what a stopped Chroma server's persist directory keeps of deleted records.

    For ``chroma+http://`` after :meth:`~memcore_chroma.ChromaHttpStore.rebuild_exclusively`:
    the server leaves the dropped collection's index folder behind and writes its new index
    files' spare capacity from its own freed memory (deleted ids were found in ``length.bin``),
    out of the client's reach. Run it on the server's ``--path`` while the server is stopped
    (``python -m memcore_chroma.erasure /var/lib/chroma``), then start the server again: it
    removes unreferenced index folders, compacts the SQLite file (what ``chroma vacuum`` does)
    and zeroes every index file's bytes past its last element.

    :raises StoreError: if the folder is not a Chroma persist directory or a file cannot be changed.
    """
    if not (path / SQLITE_FILE).is_file():
        raise StoreError(f"{path} is not a Chroma persist directory (no {SQLITE_FILE})")
    compact_persist_directory(path)
    scrub_vector_indexes(path)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m memcore_chroma.erasure CHROMA_SERVER_PATH  (with the server stopped)")
    try:
        scrub_server_folder(Path(sys.argv[1]))
    except StoreError as exc:
        sys.exit(str(exc))
