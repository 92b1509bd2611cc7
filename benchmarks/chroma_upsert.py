"""What one small upsert costs raw chromadb (no memcore in the loop): the floor under Chroma's write ratio.

    .venv/bin/python benchmarks/chroma_upsert.py --sizes 0,1000,5000

An agent's turn writes two records. ``memcore bench``'s agent loop divides the reference's write
(the embedder and a list append) by memcore's (the same embedder and the store's write); on Chroma
the store's write is one ``upsert`` of two entries (after a ``get`` of their ids, ~1 ms). This
times that upsert in raw chromadb, in a persistent and an in-memory client, into collections of
``--sizes`` entries: with memcore's entry shape (the record's JSON as the document, eleven metadata
keys) and with the least Chroma accepts (one metadata key, no document). It also reports the CPU
time of the same calls and one ``fsync`` of the temporary folder's disk, to tell Chroma's work from
the disk's. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import chromadb
import numpy as np

DIM = 384
CREATED_AT = 1_796_608_217_917_216

DOCUMENT = json.dumps(
    {
        "id": str(uuid.uuid4()),
        "message": {"role": "user", "content": "what about tea and the weather this afternoon " * 3},
        "kind": "turn",
        "created_at": "2026-12-07T00:00:00Z",
    }
)


def memcore_shaped(row: int) -> dict[str, Any]:
    """The flat metadata memcore-chroma writes for a turn with no metadata of its own."""
    return {
        "scope.tenant": "bench",
        "scope.user_id": "u",
        "scope.agent_id": f"agent-{row % 2}",
        "scope.session_id": "s",
        "scope.key": "dd773967ee785d4d2f74dc452352ba1d",
        "record_id": str(uuid.uuid4()),
        "role": "user",
        "kind": "turn",
        "created_at": CREATED_AT + row,
        "expires_at": 2**53 - 1,
        "vec": True,
    }


def _upsert(collection: Any, rng: np.random.Generator, rows: range, shaped: bool) -> None:
    count = len(rows)
    arguments: dict[str, Any] = {
        "ids": [str(uuid.uuid4()) for _ in rows],
        "embeddings": rng.standard_normal((count, DIM)).astype(np.float32),
    }
    if shaped:
        arguments["documents"] = [DOCUMENT] * count
        arguments["metadatas"] = [memcore_shaped(row) for row in rows]
    else:
        arguments["metadatas"] = [{"a": row} for row in rows]
    collection.upsert(**arguments)


def _timed(call: Callable[[], None], repeats: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "wall_ms": round(statistics.median(walls) * 1000, 2),
        "cpu_ms": round(statistics.median(cpus) * 1000, 2),
    }


def _fsync_ms(folder: str, repeats: int = 50) -> float:
    path = os.path.join(folder, "fsync-probe")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        times = []
        for _ in range(repeats):
            os.write(descriptor, b"x" * 300)
            started = time.perf_counter()
            os.fsync(descriptor)
            times.append(time.perf_counter() - started)
    finally:
        os.close(descriptor)
        os.unlink(path)
    return round(statistics.median(times) * 1000, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,1000,5000", help="entries in the collection before timing")
    parser.add_argument("--repeats", type=int, default=60, help="upserts timed per case")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        clients = {"persistent": chromadb.PersistentClient(folder), "in memory": chromadb.EphemeralClient()}
        for mode, client in clients.items():
            for size in (int(s) for s in args.sizes.split(",")):
                for shaped in (True, False):
                    name = f"u{uuid.uuid4().hex[:12]}"
                    collection = client.create_collection(name, metadata={"hnsw:space": "cosine"})
                    for start in range(0, size, 500):
                        _upsert(collection, rng, range(start, min(start + 500, size)), shaped)
                    timing = _timed(lambda c=collection, s=shaped: _upsert(c, rng, range(2), s), args.repeats)
                    entry = "memcore's entry" if shaped else "least entry"
                    results.append({"client": mode, "entries": size, "shape": entry, **timing})
                    client.delete_collection(name)
        disk = _fsync_ms(folder)
    report = {"chromadb": version("chromadb"), "fsync_ms": disk, "upsert_of_two": results}
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
