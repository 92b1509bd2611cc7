"""Adapter overhead: memcore-chroma against the raw chromadb client, same operations, same run.

Both sides use an embedded PersistentClient (each in its own folder) and do the
same work per round: write a batch of records with vectors, run scoped vector
queries, read records by id within a scope, delete them by id. The raw side
writes the same documents and flat metadata the adapter writes (so Chroma does
the same work); the difference is memcore's: validation, the id-ownership
check, JSON encoding and decoding, filter compilation.

Prints per operation the median time of each side and the median ratio over
rounds (target: within 1.10x).

    python plugins/memcore-chroma/benchmarks/adapter_overhead.py --rounds 15 --batch 500 --dim 384
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import chromadb
import numpy as np
from chromadb.api.models.Collection import Collection
from memcore_chroma import ChromaStore
from memcore_chroma.connection import client_settings
from memcore_chroma.encoding import Where, encode, flat_metadata, scope_clauses

from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.testing.helpers import make_record

OPERATIONS = ("add batch", "query", "get", "delete")


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _one_round(
    store: ChromaStore,
    raw: Collection,
    round_number: int,
    args: argparse.Namespace,
    rng: np.random.Generator,
    times: dict[str, dict[str, list[float]]],
) -> None:
    """Run every operation once on each side, interleaved so that drift hits both alike."""
    scope = Scope(tenant="bench", user_id=f"u{round_number % 5}")
    where = scope_clauses(scope)
    raw_where: Where = {"$and": where} if len(where) > 1 else where[0]
    records: list[MemoryRecord] = [
        make_record(scope, f"turn {i} of round {round_number}") for i in range(args.batch)
    ]
    vectors = rng.standard_normal((args.batch, args.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    ids = [str(r.id) for r in records]
    some = ids[: args.batch // 10]
    raw_ids = [f"raw-{i}" for i in ids]
    raw_some = raw_ids[: args.batch // 10]
    times["add batch"]["memcore"].append(_timed(lambda: store.add(records, vectors)))
    times["add batch"]["raw"].append(
        _timed(
            lambda: raw.upsert(
                ids=raw_ids,
                embeddings=vectors,
                documents=[encode(r) for r in records],
                metadatas=[flat_metadata(r, True) for r in records],  # type: ignore[misc]
            )
        )
    )
    times["query"]["memcore"].append(
        _timed(lambda: [store.search(scope, vector=q, limit=10) for q in queries])
    )
    times["query"]["raw"].append(
        _timed(
            lambda: [
                raw.query(
                    query_embeddings=[q],
                    n_results=10,
                    where={"$and": [raw_where, {"vec": True}]},
                    include=["documents", "distances"],
                )
                for q in queries
            ]
        )
    )
    times["get"]["memcore"].append(_timed(lambda: store.get(scope, some)))
    times["get"]["raw"].append(_timed(lambda: raw.get(ids=raw_some, where=raw_where, include=["documents"])))
    times["delete"]["memcore"].append(_timed(lambda: store.delete(scope, some)))
    times["delete"]["raw"].append(
        _timed(lambda: raw.delete(ids=raw.get(ids=raw_some, where=raw_where, include=[])["ids"]))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=500, help="records written per round")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=20, help="queries per round")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    times: dict[str, dict[str, list[float]]] = {op: {"raw": [], "memcore": []} for op in OPERATIONS}

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        store = ChromaStore(root / "memcore", collection="bench")
        raw_client = chromadb.PersistentClient(path=str(root / "raw"), settings=client_settings())
        raw = raw_client.create_collection(
            "bench", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
        )
        try:
            for round_number in range(args.rounds):
                _one_round(store, raw, round_number, args, rng, times)
        finally:
            store.close()
            raw_client.close()  # type: ignore[attr-defined]

    print(f"{args.rounds} rounds, batches of {args.batch}, {args.dim}-d, {args.queries} queries per round")
    print(f"{'operation':<10} {'raw ms':>9} {'memcore ms':>11} {'ratio':>7}")
    for op in OPERATIONS:
        raw_ms = statistics.median(times[op]["raw"]) * 1000
        ours_ms = statistics.median(times[op]["memcore"]) * 1000
        ratio = statistics.median(m / r for m, r in zip(times[op]["memcore"], times[op]["raw"], strict=True))
        print(f"{op:<10} {raw_ms:>9.2f} {ours_ms:>11.2f} {ratio:>6.2f}x")


if __name__ == "__main__":
    main()
