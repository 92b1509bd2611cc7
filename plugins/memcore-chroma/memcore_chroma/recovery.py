"""Crash recovery for embedded Chroma folders, done before chromadb opens them.

Chroma (1.5) writes its HNSW index files in place, so a process killed while
saving them leaves files that make a later open error, return wrong vectors
without a word, or crash the process (chroma-core/chroma#7238, #7069, #6949).
Nothing can be checked cheaply enough inside chromadb, so the plugin keeps what
it needs to rebuild the index outside it:

* **The whole log.** Chroma's SQLite log (``embeddings_queue``) holds every
  write with its vector; by default Chroma trims it once the index is saved.
  The plugin turns trimming off (:func:`keep_whole_log`) on every open, and
  records in ``memcore.log-complete`` that the log reaches back to the first
  write (a new folder, or an older one whose log was never trimmed). The log
  grows with every write until ``purge()``, which erases deleted records from
  it too: dropping the old collection drops its log.
* **An open marker.** ``memcore.open`` is created once the client has opened
  the folder and removed after a clean close. Found at open, it means the last
  process died: :func:`reset_vector_indexes` deletes every HNSW index folder and
  its watermark, and Chroma rebuilds the index from the log at first use.

SQLite itself (a rollback journal) survives a kill; every acknowledged write is
in the log before ``upsert`` returns.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from memcore.errors import StoreCorruptedError, StoreError
from memcore.locking import fsync_dir
from memcore_chroma.erasure import SQLITE_FILE

OPEN_MARKER = "memcore.open"
LOG_COMPLETE = "memcore.log-complete"
_KEEP_LOG = json.dumps({"automatically_purge": False, "_type": "EmbeddingsQueueConfigurationInternal"})


def needs_recovery(path: Path) -> bool:
    """Whether the last process to open ``path`` died without closing it."""
    return (path / OPEN_MARKER).exists()


def reset_vector_indexes(path: Path) -> None:
    """Delete every HNSW index folder and its watermark, so Chroma replays the whole log.

    Call it with the folder's lock held and no client open on it.

    :raises StoreCorruptedError: if the log does not reach back to the first write
        (a folder made before the plugin kept it): the documents are intact, the
        vectors are not, and rebuilding with the log's tail would lose some silently.
    """
    if not ((path / LOG_COMPLETE).exists() or log_never_trimmed(path)):
        raise StoreCorruptedError(
            f"the Chroma store at {path} was not closed cleanly and its vector index may be damaged, "
            "but its log was trimmed before memcore kept it whole, so the index cannot be rebuilt. "
            f"The records' documents are intact. Either delete {path / OPEN_MARKER} to open it as it is "
            "(searches may fail or be wrong), or copy the documents out and re-embed them into a new store"
        )
    try:
        with closing(sqlite3.connect(path / SQLITE_FILE, timeout=30)) as database, database:
            segments = [row[0] for row in database.execute("SELECT id FROM segments WHERE scope = 'VECTOR'")]
            database.executemany("DELETE FROM max_seq_id WHERE segment_id = ?", [(s,) for s in segments])
        for segment in segments:
            shutil.rmtree(path / segment, ignore_errors=True)
    except sqlite3.Error as exc:
        raise StoreCorruptedError(f"cannot recover the Chroma store at {path}: {exc}") from None


def keep_whole_log(path: Path) -> bool:
    """Turn off Chroma's trimming of its log (effective when a client next opens ``path``).

    :returns: whether the setting was found and written (``False`` if this
        chromadb keeps the setting elsewhere: then the log is not known to be whole).
    """
    with closing(sqlite3.connect(path / SQLITE_FILE, timeout=30)) as database, database:
        try:
            cursor = database.execute("UPDATE embeddings_queue_config SET config_json_str = ?", (_KEEP_LOG,))
        except sqlite3.OperationalError:
            return False
        return cursor.rowcount == 1


def log_never_trimmed(path: Path) -> bool:
    """Whether the log of a folder made before memcore kept it still reaches back to the first write.

    Chroma numbers log entries from 1 and trims from the oldest; a log that still
    starts at 1 (or an empty store) was never trimmed.
    """
    with closing(sqlite3.connect(path / SQLITE_FILE, timeout=30)) as database:
        try:
            (first,) = database.execute("SELECT MIN(seq_id) FROM embeddings_queue").fetchone()
            (stored,) = database.execute("SELECT COUNT(*) FROM embeddings").fetchone()
        except sqlite3.OperationalError:
            return False
    return first == 1 or (first is None and stored == 0)


def mark(path: Path, name: str) -> None:
    """Create the marker file ``name`` in ``path`` durably."""
    with open(path / name, "w"):
        pass
    fsync_dir(path)


def unmark(path: Path, name: str) -> None:
    """Remove the marker file ``name`` from ``path`` durably."""
    (path / name).unlink(missing_ok=True)
    fsync_dir(path)


def drop_unapplied(path: Path, collection_id: str, ids: list[str]) -> int:
    """Remove from the log the writes of the entries ``ids`` (Chroma ids, not record ids) that the
    collection's metadata segment never applied.

    Chroma appends a write to its log, then applies it; when applying fails (a full disk: "Failed
    to apply logs to the metadata segment") the call raises but the entry stays, so it would be
    applied at the next open (a batch that raised, stored after all) and is retried, and fails
    again, on every later write. Call it with no client open on ``path`` (then drop the vector
    indexes, which may have applied them, for Chroma to rebuild from the log).

    :returns: how many log entries were removed.
    :raises StoreError: if the log cannot be changed (then the entries may be applied later).
    """
    try:
        with closing(sqlite3.connect(path / SQLITE_FILE, timeout=30)) as database, database:
            row = database.execute(
                "SELECT m.seq_id FROM segments s JOIN max_seq_id m ON m.segment_id = s.id "
                "WHERE s.scope = 'METADATA' AND s.collection = ?",
                (collection_id,),
            ).fetchone()
            applied = row[0] if row and row[0] is not None else 0
            removed = 0
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                cursor = database.execute(
                    f"DELETE FROM embeddings_queue WHERE seq_id > ? AND topic LIKE ? AND id IN ({marks})",
                    (applied, f"%/{collection_id}", *chunk),
                )
                removed += cursor.rowcount
            return removed
    except sqlite3.Error as exc:
        raise StoreError(
            f"a write to the Chroma store at {path} failed, and its entries could not be removed from "
            f"Chroma's log ({exc}): they may be applied when the store is next opened"
        ) from None
