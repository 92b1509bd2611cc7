"""Crash recovery of the embedded store: index files torn the ways Chroma tears them.

Killed writers are in test_reliability.py (the shared battery).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from memcore_chroma import ChromaStore
from memcore_chroma.recovery import LOG_COMPLETE, OPEN_MARKER

from memcore.errors import StoreCorruptedError
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors

SCOPE = Scope(tenant="crash")


def _store_left_open(root: Path, count: int) -> tuple[list[object], np.ndarray]:
    """A store with ``count`` records, closed, then marked as if its process had died."""
    records = [make_record(SCOPE, f"r{i}") for i in range(count)]
    vectors = random_vectors(count, seed=5)
    with ChromaStore(root) as store:
        for start in range(0, count, 500):
            store.add(records[start : start + 500], vectors[start : start + 500])
    (root / OPEN_MARKER).touch()
    return records, vectors


def _index_files(root: Path, name: str) -> list[Path]:
    return [folder / name for folder in root.iterdir() if (folder / name).exists()]


@pytest.mark.parametrize("damage", ["garbage-vectors", "empty-lengths", "torn-header", "index-deleted"])
def test_a_damaged_index_after_a_crash_is_rebuilt_from_the_log(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "store"
    records, vectors = _store_left_open(root, 2_500)  # past Chroma's 1,000-entry index saves
    if damage == "garbage-vectors":
        for data in _index_files(root, "data_level0.bin"):
            size = data.stat().st_size
            with data.open("r+b") as handle:
                handle.seek(size // 2)
                handle.write(os.urandom(size - size // 2))
    elif damage == "empty-lengths":
        for lengths in _index_files(root, "length.bin"):
            lengths.write_bytes(b"")
    elif damage == "torn-header":
        for header in _index_files(root, "header.bin"):
            header.write_bytes(header.read_bytes()[:37])
    else:
        for header in _index_files(root, "header.bin"):
            for file in header.parent.iterdir():
                file.unlink()
    assert _index_files(root, "data_level0.bin") or damage == "index-deleted"
    with ChromaStore(root) as store:
        assert store.count(SCOPE) == 2_500
        for row in (0, 1_234, 2_499):
            [best] = store.search(SCOPE, vector=vectors[row], limit=1)
            assert best.record.id == records[row].id  # type: ignore[attr-defined]
            assert best.score > 0.999
    assert not (root / OPEN_MARKER).exists(), "a clean close removes the marker"


def test_a_folder_whose_log_was_trimmed_is_not_rebuilt_silently(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_left_open(root, 10)
    (root / LOG_COMPLETE).unlink()
    with closing(sqlite3.connect(root / "chroma.sqlite3")) as database, database:
        database.execute("DELETE FROM embeddings_queue WHERE seq_id < 5")  # as Chroma's trimming does
    with pytest.raises(StoreCorruptedError, match="re-embed"):
        ChromaStore(root)
    (root / OPEN_MARKER).unlink()  # what the error offers: open it as it is
    with ChromaStore(root) as store:
        assert store.count(SCOPE) == 10


def test_an_older_folder_whose_log_was_never_trimmed_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "store"
    records, vectors = _store_left_open(root, 10)
    (root / LOG_COMPLETE).unlink()
    with ChromaStore(root) as store:
        [best] = store.search(SCOPE, vector=vectors[3], limit=1)
        assert best.record.id == records[3].id  # type: ignore[attr-defined]
    assert (root / LOG_COMPLETE).exists()
