"""Erase what embedded Chroma leaves on disk after deletes.

Chroma keeps a deleted record's vector in the HNSW files of its collection
(chroma-core/chroma#7662, also after ``chroma vacuum``) and leaves a deleted
collection's index folder behind (#5259). After the store has rebuilt its
collection without the deleted records, this drops the index folders that no
segment references any more and compacts the SQLite file, whose free pages
would otherwise still hold the deleted documents and log entries.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from memcore.errors import StoreError

SQLITE_FILE = "chroma.sqlite3"
_SEGMENT_FOLDER = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def compact_persist_directory(path: Path) -> None:
    """Remove unreferenced segment folders under ``path`` and ``VACUUM`` its SQLite file.

    Call it only while holding the path's lock (no other process uses it).

    :raises StoreError: if the database or a folder cannot be read or removed.
    """
    try:
        with closing(sqlite3.connect(path / SQLITE_FILE, timeout=30)) as database:
            referenced = {row[0] for row in database.execute("SELECT id FROM segments")}
            database.execute("VACUUM")
        for folder in path.iterdir():
            if folder.is_dir() and _SEGMENT_FOLDER.fullmatch(folder.name) and folder.name not in referenced:
                shutil.rmtree(folder)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"compacting the Chroma files under {path} failed: {exc}") from None
