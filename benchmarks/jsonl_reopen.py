"""How long the jsonl store takes to write and to reopen N records of 384-d vectors.

    .venv/bin/python benchmarks/jsonl_reopen.py --records 100000

Prints JSON: write throughput, reopen seconds, file size per record.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores.jsonl import JsonlStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--scopes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "store"
        started = time.perf_counter()
        with JsonlStore(root) as store:
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
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        started = time.perf_counter()
        with JsonlStore(root) as store:
            reopen_seconds = time.perf_counter() - started
            assert store.count(Scope(tenant="bench")) == args.records
    print(
        json.dumps(
            {
                "records": args.records,
                "dim": args.dim,
                "write_records_per_second": round(args.records / write_seconds),
                "reopen_seconds": round(reopen_seconds, 2),
                "bytes_per_record": round(size / args.records),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
