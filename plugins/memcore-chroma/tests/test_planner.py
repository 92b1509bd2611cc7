"""The SQLite planner statistics of embedded folders (:mod:`memcore_chroma.planner`): gathered once a
folder is large enough and at each doubling, at open or in a child process, never at a write's expense."""

from __future__ import annotations

import logging
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from uuid import UUID

import pytest
from chroma_server import ChromaServer
from memcore_chroma import ChromaHttpStore, ChromaStore, erasure, planner, urls

from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors

SCOPE = Scope(tenant="t", user_id="u")
DIM = 8


def _add(store: ChromaStore | ChromaHttpStore, count: int, seed: int) -> list[UUID]:
    records = [make_record(SCOPE, f"note {seed}-{i}") for i in range(count)]
    store.add(records, random_vectors(count, seed=seed, dim=DIM))
    return [record.id for record in records]


def _statistics(folder: Path) -> list[tuple[str, str, str]]:
    """The rows of sqlite_stat1 (read with no Chroma client open on the folder, or across processes)."""
    with closing(sqlite3.connect(folder / erasure.SQLITE_FILE)) as database:
        if not database.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            return []
        return [tuple(row) for row in database.execute("SELECT tbl, idx, stat FROM sqlite_stat1")]


def _sampled_tables(folder: Path) -> list[str]:
    """The statistics tables that would hold index keys (built with STAT3 or STAT4) and are not empty."""
    with closing(sqlite3.connect(folder / erasure.SQLITE_FILE)) as database:
        names = [
            row[0]
            for row in database.execute("SELECT name FROM sqlite_master WHERE name LIKE 'sqlite_stat%'")
        ]
        return [
            n
            for n in names
            if n != "sqlite_stat1" and database.execute(f"SELECT count(*) FROM {n}").fetchone()[0]
        ]


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(planner, "MIN_ENTRIES", 40)
    return 40


def test_gathered_once_the_folder_holds_enough_entries_then_at_each_doubling(
    tmp_path: Path, small_threshold: int
) -> None:
    folder = tmp_path / "db"
    with ChromaStore(folder) as store:
        _add(store, 30, seed=1)
        assert planner.analyzed_entries(folder) == 0  # 30 < 40: none yet
        _add(store, 20, seed=2)
        assert planner.analyzed_entries(folder) == 50
        _add(store, 49, seed=3)
        assert planner.analyzed_entries(folder) == 50  # 99 < 2 x 50
        _add(store, 1, seed=4)
        assert planner.analyzed_entries(folder) == 100
        assert len(store.list(SCOPE, limit=None)) == 100
    tables = {(table, index) for table, index, _ in _statistics(folder)}
    assert ("embeddings", "sqlite_autoindex_embeddings_1") in tables
    assert ("embedding_metadata", "embedding_metadata_string_value") in tables


def _plant_index_samples(folder: Path) -> None:
    """What a SQLite built with STAT4 leaves after ``ANALYZE``: ``sqlite_stat4`` rows holding whole
    index keys (this build has no STAT4, so the table is made by hand), of a table the gathering
    does not analyze, so that only its emptying clears them."""
    with closing(sqlite3.connect(folder / erasure.SQLITE_FILE)) as database, database:
        database.execute("PRAGMA writable_schema = ON")
        database.execute("CREATE TABLE IF NOT EXISTS sqlite_stat4(tbl, idx, neq, nlt, ndlt, sample)")
        database.execute(
            "INSERT INTO sqlite_stat4 VALUES ('collections', 'x', '1', '1', '1', 'a deleted secret')"
        )
    assert _sampled_tables(folder) == ["sqlite_stat4"]


def test_the_statistics_hold_counts_only_never_a_deleted_records_values(
    tmp_path: Path, small_threshold: int
) -> None:
    folder = tmp_path / "db"
    with ChromaStore(folder) as store:
        ids = _add(store, 30, seed=1)
        store.delete(SCOPE, [ids[0]])
    _plant_index_samples(folder)
    with ChromaStore(folder) as store:
        _add(store, 20, seed=2)  # 49 entries: gathered
        assert planner.analyzed_entries(folder) == 49
    rows = _statistics(folder)
    assert rows
    for _, _, stat in rows:
        assert re.fullmatch(r"[0-9]+( [0-9]+)*( [a-z]+(=[0-9]+)?)*", stat), stat
    assert _sampled_tables(folder) == []


def test_a_purge_leaves_no_index_samples(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    with ChromaStore(folder) as store:
        _add(store, 10, seed=1)
    _plant_index_samples(folder)
    with ChromaStore(folder) as store:
        store.purge()
    assert _sampled_tables(folder) == []


def test_the_gathering_never_runs_in_the_process_that_has_chroma_open(
    tmp_path: Path, small_threshold: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chroma's SQLite library does not share this process's POSIX locks: the child gathers."""
    folder = tmp_path / "db"

    def not_here(path: Path) -> int:
        raise AssertionError("gathered in the process that has Chroma open")

    monkeypatch.setattr(planner, "analyze", not_here)
    with ChromaStore(folder) as store:
        _add(store, 60, seed=1)
        assert planner.analyzed_entries(folder) == 60
    (folder / planner.MARKER).unlink()
    with ChromaStore(folder) as store:  # due at open
        assert planner.analyzed_entries(folder) == 60


def test_a_folder_that_grew_unanalyzed_is_analyzed_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "db"
    with ChromaStore(folder) as store:
        _add(store, 60, seed=1)
    assert planner.analyzed_entries(folder) == 0 and _statistics(folder) == []

    monkeypatch.setattr(planner, "MIN_ENTRIES", 40)
    with ChromaStore(folder) as store:
        assert planner.analyzed_entries(folder) == 60
        assert len(store.list(SCOPE, limit=None)) == 60
    assert _statistics(folder)


def test_a_failed_gathering_is_logged_and_loses_no_write(
    tmp_path: Path, small_threshold: int, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "db"
    with ChromaStore(folder) as store:
        _add(store, 30, seed=1)
        (folder / f"{planner.MARKER}.tmp").mkdir()  # the child cannot write its marker
        with caplog.at_level(logging.WARNING, logger=planner.__name__):
            _add(store, 20, seed=2)
        assert "could not gather the query planner statistics" in caplog.text
        assert len(store.list(SCOPE, limit=None)) == 50
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=planner.__name__):
            _add(store, 10, seed=3)  # not tried again before the entries double
        assert caplog.text == ""
    with ChromaStore(folder) as store:
        assert len(store.list(SCOPE, limit=None)) == 60


def test_a_process_not_started_by_python_logs_instead_of_running_the_child(
    tmp_path: Path, small_threshold: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under uWSGI ``sys.executable`` is the server's binary, which must not be started as the child."""
    folder = tmp_path / "db"
    monkeypatch.setattr(sys, "executable", str(tmp_path / "uwsgi"))
    with ChromaStore(folder) as store, caplog.at_level(logging.WARNING, logger=planner.__name__):
        _add(store, 50, seed=1)
        assert "no Python interpreter to run the child with" in caplog.text
        assert len(store.list(SCOPE, limit=None)) == 50
    assert planner.analyzed_entries(folder) == 0


def test_a_failed_gathering_at_open_is_logged_and_the_store_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "db"
    with ChromaStore(folder) as store:
        _add(store, 60, seed=1)
    (folder / f"{planner.MARKER}.tmp").mkdir()
    monkeypatch.setattr(planner, "MIN_ENTRIES", 40)
    with caplog.at_level(logging.WARNING, logger=planner.__name__), ChromaStore(folder) as store:
        assert "could not gather the query planner statistics" in caplog.text
        assert len(store.list(SCOPE, limit=None)) == 60
        caplog.clear()
        _add(store, 50, seed=2)  # 110 < 2 x 60: not tried again yet
        assert caplog.text == ""


def test_a_running_servers_folder_is_analyzed_by_the_command_and_keeps_serving(
    chroma_server: ChromaServer, collection_name: str
) -> None:
    address = urls.ServerAddress("127.0.0.1", chroma_server.port, ssl=False)
    with ChromaHttpStore(address, collection=collection_name) as store:
        _add(store, 50, seed=1)
        done = subprocess.run(
            [sys.executable, "-m", "memcore_chroma.planner", str(chroma_server.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # no runpy warning: the package does not import the module first
        assert int(done.stdout) >= 50
        assert _statistics(chroma_server.path)
        _add(store, 5, seed=2)
        assert len(store.list(SCOPE, limit=None)) == 55


def test_the_command_refuses_a_folder_that_is_not_chromas(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memcore_chroma.planner", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "not a Chroma persist directory" in done.stderr
    assert not (tmp_path / erasure.SQLITE_FILE).exists()
