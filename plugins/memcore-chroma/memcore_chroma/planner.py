"""Query planner statistics for an embedded Chroma's SQLite file, which Chroma (1.5) never gathers.

Chroma answers a ``get`` or ``query`` under a ``where`` with one SQL query that joins the
collection's entries (by their segment's index) to the ``where``'s matches (by the metadata's
key-and-value index). With no statistics, SQLite's planner guesses the segment's index the more
selective, and walks every entry of the collection testing each: listing a tenant's 100 ids among
100,000 entries took 10.1 ms, the other reads under a ``where`` 9.0-13.1 ms. With statistics
(``ANALYZE``, sampled: ``PRAGMA analysis_limit``), it looks the matches up first: 0.93 ms, and
0.61-2.28 ms (``benchmarks/chroma_planner_statistics.py``).

An embedded store gathers them once its folder holds :data:`MIN_ENTRIES` entries, then each time
the entries may have doubled (:class:`Growth`): checked at open and after each write, gathered in
a child process (``python -P -m memcore_chroma.planner``). Chroma's Rust core links its own SQLite
library, whose POSIX locks do not exclude this process's ``sqlite3`` (see
:mod:`memcore_chroma.connection`); a child's locks do, as any two processes' on one SQLite file.

Chroma's open connections plan with the statistics once the file first has them (creating
``sqlite_stat1`` changes its schema, which they reload); later gatherings refresh the figures for
connections opened after them. The plan that matters, the metadata index first, holds from the
first gathering on: the figures are ratios that keep their order as the folder grows.

For a Chroma server, run ``python -m memcore_chroma.planner /var/lib/chroma`` on its ``--path``
(safe while it runs, for the same reason), after it has grown.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from memcore_chroma.erasure import SQLITE_FILE, drop_index_samples

MARKER = "memcore.planner-statistics"
"""Holds how many entries the folder's SQLite file had when its statistics were last gathered."""

MIN_ENTRIES = 1_000
"""No statistics below this many entries: walking them all costs well under a millisecond."""

GROWTH = 2
"""Statistics are gathered again once the entries may have grown this many times since."""

ANALYSIS_LIMIT = 1_000
"""Rows SQLite samples per index (``PRAGMA analysis_limit``): 0.13-0.33 s at 100,000 entries, where
a full ``ANALYZE`` of the file took 0.6 s."""

ANALYZED_TABLES = ("embeddings", "embedding_metadata")
"""The tables whose indexes a ``where`` chooses between."""

BUSY_TIMEOUT_SECONDS = 30.0
"""How long gathering waits for Chroma's own writes to release the file."""

CHILD_TIMEOUT_SECONDS = 120.0
"""How long a write waits for the child gathering (which waits up to :data:`BUSY_TIMEOUT_SECONDS`
for the file) before it gives up on it."""

_PYTHON = re.compile(r"(python|pypy)[0-9.]*w?(\.exe)?")
"""The file names of Python interpreters (``python3.11``, ``pypy3``, ``pythonw.exe``)."""

logger = logging.getLogger(__name__)


def entries(path: Path) -> int:
    """How many entries (of every collection) the SQLite file of the folder ``path`` holds.

    :raises sqlite3.Error: if the file cannot be read.
    """
    with closing(sqlite3.connect(path / SQLITE_FILE, timeout=BUSY_TIMEOUT_SECONDS)) as database:
        (count,) = database.execute("SELECT count(*) FROM embeddings").fetchone()
    return int(count)


def analyze(path: Path) -> int:
    """Gather the planner statistics of the folder ``path``'s SQLite file; how many entries it holds.

    In one transaction, so that a failure leaves the statistics as they were; then the marker.
    Only in a process where no Chroma client has the file open (:func:`analyze_in_child` from one
    that may).

    :raises sqlite3.Error, OSError: if the file cannot be read or written (if only the marker could
        not be written, the statistics are new and the marker is as it was).
    """
    with closing(
        sqlite3.connect(path / SQLITE_FILE, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    ) as database:
        database.execute(f"PRAGMA analysis_limit = {ANALYSIS_LIMIT}")
        database.execute("BEGIN IMMEDIATE")
        try:
            for table in ANALYZED_TABLES:
                database.execute(f"ANALYZE {table}")
            drop_index_samples(database)  # kept by a SQLite built with STAT4: whole index keys
            (count,) = database.execute("SELECT count(*) FROM embeddings").fetchone()
            database.execute("COMMIT")
        except BaseException:
            database.execute("ROLLBACK")
            raise
    _write_marker(path, int(count))
    return int(count)


def analyzed_entries(path: Path) -> int:
    """How many entries the folder ``path`` had when its statistics were last gathered (0: never)."""
    try:
        return max(0, int((path / MARKER).read_text(encoding="ascii")))
    except (OSError, ValueError):
        return 0


def _write_marker(path: Path, count: int) -> None:
    staged = path / f"{MARKER}.tmp"
    staged.write_text(f"{count}\n", encoding="ascii")
    os.replace(staged, path / MARKER)


def is_due(now: int, analyzed: int) -> bool:
    """Whether a folder of ``now`` entries, ``analyzed`` at the last gathering, needs it again."""
    return now >= MIN_ENTRIES and now >= GROWTH * analyzed


def analyze_in_child(path: Path) -> int:
    """:func:`analyze` in a child process (safe while this process has a Chroma client on ``path``).

    :raises OSError, subprocess.SubprocessError, ValueError: if the child cannot run or fails, or
        this process was not started by a Python interpreter (``sys.executable`` is a server such
        as uWSGI, which must not be started instead).
    """
    interpreter = Path(sys.executable or "?")
    if not _PYTHON.fullmatch(interpreter.name.lower()):
        raise subprocess.SubprocessError(
            f"no Python interpreter to run the child with (sys.executable: {interpreter})"
        )
    done = subprocess.run(
        [str(interpreter), "-P", "-m", __name__, str(path)],  # -P: nothing from the working directory
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise subprocess.SubprocessError(done.stderr.strip() or f"exit status {done.returncode}")
    return int(done.stdout)  # ValueError if it printed no count (a child that did not run)


class Growth:
    """The entries of one embedded folder as its process writes them, and when to gather again.

    Counts entries written, not entries new (an upsert of an entry counts again), so a store that
    rewrites much gathers early: a few tenths of a second, logarithmically often.
    """

    def __init__(self, path: Path, now: int, analyzed: int) -> None:
        self._path = path
        self._entries = now
        self._analyzed = analyzed

    @classmethod
    def at_open(cls, path: Path) -> Growth:
        """The growth of the folder ``path``, its statistics gathered first if due.

        A failure is logged, never raised: the store opens, and gathers once it has written
        :data:`MIN_ENTRIES` (if the file could not be read) or doubled (if it could).
        """
        try:
            growth = cls(path, entries(path), analyzed_entries(path))
        except sqlite3.Error as exc:
            _could_not(path, exc)
            return cls(path, 0, 0)
        growth.wrote(0)
        return growth

    def wrote(self, count: int) -> None:
        """``count`` entries were written: gather the statistics in a child if they are due now.

        A failure is logged, never raised (the write is in), and waits for the next doubling.
        """
        self._entries += count
        if not is_due(self._entries, self._analyzed):
            return
        try:
            self._entries = analyze_in_child(self._path)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            _could_not(self._path, exc)
        self._analyzed = self._entries  # also after a failure: not tried again before a doubling


def _could_not(path: Path, exc: BaseException) -> None:
    logger.warning(
        "memcore-chroma: could not gather the query planner statistics of %s (%s); "
        "reads under a where stay slower until the store grows to twice its size",
        path,
        exc,
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m memcore_chroma.planner CHROMA_PATH  (a folder, or a server's --path)")
    folder = Path(sys.argv[1])
    if not (folder / SQLITE_FILE).is_file():
        sys.exit(f"{folder} is not a Chroma persist directory (no {SQLITE_FILE})")
    try:
        print(analyze(folder))
    except (sqlite3.Error, OSError) as exc:
        sys.exit(f"gathering the planner statistics of {folder} failed: {exc}")
