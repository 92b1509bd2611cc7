"""How long the jsonl store takes to write, close and reopen N records of 384-d vectors.

    .venv/bin/python benchmarks/jsonl_reopen.py --records 100000

Prints JSON: write throughput; close seconds (writing the snapshots); reopen
seconds from the logs alone (a store written before snapshots existed), with
the snapshots (after a close), and with ``--tail`` records appended past them by
a process that crashed (no close); how much of a reopen with snapshots is
:meth:`ScopedIndex.load_rows`; bytes on disk per record.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores.jsonl import JsonlStore
from memcore.stores.jsonl_snapshot import SNAPSHOT_NAME
from memcore.stores.partition import Rows
from memcore.stores.scoped_index import ScopedIndex

_CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from memcore.records import MemoryRecord, Message
    from memcore.scope import Scope
    from memcore.stores.jsonl import JsonlStore
    root, count, scopes, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = JsonlStore(root)
    records = [
        MemoryRecord(
            scope=Scope(tenant="bench", user_id=f"u{i % scopes}"),
            message=Message(role="user", content=f"after the snapshot {i}"),
        )
        for i in range(count)
    ]
    store.add(records, np.random.default_rng(1).standard_normal((count, dim)).astype(np.float32))
    os._exit(0)  # a crash: no close, so no new snapshot
    """
)


def _write(root: Path, args: argparse.Namespace) -> tuple[float, float]:
    """Seconds to write the records, and to close the store (which writes the snapshots)."""
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    store = JsonlStore(root)
    for start in range(0, args.records, args.batch):
        count = min(args.batch, args.records - start)
        records = [
            MemoryRecord(
                scope=Scope(tenant="bench", user_id=f"u{(start + i) % args.scopes}"),
                message=Message(role="user", content=f"turn {start + i} about something"),
                metadata={"i": start + i},
            )
            for i in range(count)
        ]
        store.add(records, rng.standard_normal((count, args.dim)).astype(np.float32))
    write_seconds = time.perf_counter() - started
    started = time.perf_counter()
    store.close()
    return write_seconds, time.perf_counter() - started


@contextmanager
def _load_rows_timer(spent: list[float]) -> Iterator[None]:
    real = ScopedIndex.load_rows

    def timed(self: ScopedIndex, scope: Scope, rows: Rows) -> None:
        started = time.perf_counter()
        real(self, scope, rows)
        spent.append(time.perf_counter() - started)

    ScopedIndex.load_rows = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        ScopedIndex.load_rows = real  # type: ignore[method-assign]


def _reopen(root: Path, expected: int) -> tuple[float, float]:
    """Seconds to open the store, and how many of them ``load_rows`` took."""
    spent: list[float] = []
    with _load_rows_timer(spent):
        started = time.perf_counter()
        store = JsonlStore(root)
        seconds = time.perf_counter() - started
    with store:
        assert store.count(Scope(tenant="bench")) == expected
    return seconds, sum(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--scopes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--tail", type=int, default=1_000, help="records appended past the snapshots")
    parser.add_argument(
        "--skip-logs-only", action="store_true", help="skip the (slow) reopen from the logs alone"
    )
    args = parser.parse_args()
    figures: dict[str, Any] = {"records": args.records, "dim": args.dim, "scopes": args.scopes}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "store"
        write_seconds, close_seconds = _write(root, args)
        figures["write_records_per_second"] = round(args.records / write_seconds)
        figures["close_seconds"] = round(close_seconds, 2)
        figures["bytes_per_record"] = round(
            sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / args.records
        )
        seconds, in_load_rows = _reopen(root, args.records)
        figures["reopen_seconds"] = round(seconds, 3)
        figures["reopen_load_rows_seconds"] = round(in_load_rows, 3)
        subprocess.run(
            [
                sys.executable,
                "-c",
                _CRASHING_WRITER,
                str(root),
                str(args.tail),
                str(args.scopes),
                str(args.dim),
            ],
            check=True,
        )
        seconds, _ = _reopen(root, args.records + args.tail)
        figures[f"reopen_with_{args.tail}_past_snapshot_seconds"] = round(seconds, 3)
        if not args.skip_logs_only:
            for snapshot in root.glob(f"scopes/*/{SNAPSHOT_NAME}"):
                snapshot.unlink()
            seconds, _ = _reopen(root, args.records + args.tail)
            figures["reopen_logs_only_seconds"] = round(seconds, 3)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
