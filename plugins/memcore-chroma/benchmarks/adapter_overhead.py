"""Adapter overhead: memcore-chroma against the raw chromadb client, same operations, same run.

Both sides use an embedded PersistentClient (each in its own folder) and do the
same work: write a batch of records with vectors, run scoped vector queries,
read records by id within a scope, delete them by id within the scope. The raw
side writes the same documents and flat metadata the adapter writes (so Chroma
does the same work), prepared before its clock starts, and parses the JSON
documents it reads (``json.loads``), as a real user of raw Chroma would. The
difference is memcore's: validation, the id-ownership check, encoding records,
decoding them into models, filter compilation.

Each round takes several samples of every operation; the side that runs first
alternates from sample to sample, so that caches and drift favour neither.
Prints per operation the median time of each side, the median ratio over all
samples (target: within 1.10x) and the median absolute gap in milliseconds.

    python plugins/memcore-chroma/benchmarks/adapter_overhead.py --rounds 10 --samples 3 --batch 500 --dim 384
"""

from __future__ import annotations

import argparse
import json
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
Times = dict[str, dict[str, list[float]]]


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _parsed(documents: list[str | None] | None) -> list[object]:
    return [json.loads(d) for d in documents or [] if d is not None]


def _pair(
    times: Times, op: str, ours: Callable[[], object], raw: Callable[[], object], raw_first: bool
) -> None:
    """Time one sample of ``op`` on each side, in the order given."""
    if raw_first:
        times[op]["raw"].append(_timed(raw))
        times[op]["memcore"].append(_timed(ours))
    else:
        times[op]["memcore"].append(_timed(ours))
        times[op]["raw"].append(_timed(raw))


def _one_sample(
    store: ChromaStore,
    raw: Collection,
    label: str,
    raw_first: bool,
    args: argparse.Namespace,
    rng: np.random.Generator,
    times: Times,
) -> None:
    """Run every operation once on each side."""
    scope = Scope(tenant="bench", user_id=f"u{hash(label) % 5}")
    where = scope_clauses(scope)
    raw_where: Where = {"$and": where} if len(where) > 1 else where[0]
    records: list[MemoryRecord] = [make_record(scope, f"turn {i} of {label}") for i in range(args.batch)]
    vectors = rng.standard_normal((args.batch, args.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    ids = [str(r.id) for r in records]
    some = ids[: args.batch // 10]
    raw_ids = [f"raw-{i}" for i in ids]
    raw_some = raw_ids[: args.batch // 10]
    # what a raw user would have at hand: the documents and metadata, not memcore's work
    documents = [encode(r) for r in records]
    metadatas = [flat_metadata(r, True) for r in records]
    query_where = {"$and": [raw_where, {"vec": True}]}

    def raw_add() -> None:
        raw.upsert(ids=raw_ids, embeddings=vectors, documents=documents, metadatas=metadatas)  # type: ignore[arg-type]

    def raw_query() -> None:
        for q in queries:
            found = raw.query(
                query_embeddings=[q], n_results=10, where=query_where, include=["documents", "distances"]
            )
            _parsed((found["documents"] or [[]])[0])

    def raw_get() -> None:
        _parsed(raw.get(ids=raw_some, where=raw_where, include=["documents"])["documents"])

    def raw_delete() -> None:
        raw.delete(ids=raw.get(ids=raw_some, where=raw_where, include=[])["ids"], where=raw_where)

    _pair(times, "add batch", lambda: store.add(records, vectors), raw_add, raw_first)
    _pair(
        times,
        "query",
        lambda: [store.search(scope, vector=q, limit=10) for q in queries],
        raw_query,
        raw_first,
    )
    _pair(times, "get", lambda: store.get(scope, some), raw_get, raw_first)
    _pair(times, "delete", lambda: store.delete(scope, some), raw_delete, raw_first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--samples", type=int, default=3, help="samples of each operation per round")
    parser.add_argument("--batch", type=int, default=500, help="records written per sample")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=20, help="queries per sample")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    times: Times = {op: {"raw": [], "memcore": []} for op in OPERATIONS}

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        store = ChromaStore(root / "memcore", collection="bench")
        raw_client = chromadb.PersistentClient(path=str(root / "raw"), settings=client_settings())
        raw = raw_client.create_collection(
            "bench", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
        )
        try:
            for round_number in range(args.rounds):
                for sample in range(args.samples):
                    raw_first = (round_number * args.samples + sample) % 2 == 1
                    _one_sample(store, raw, f"{round_number}.{sample}", raw_first, args, rng, times)
        finally:
            store.close()
            raw_client.close()  # type: ignore[attr-defined]

    samples = args.rounds * args.samples
    print(
        f"{args.rounds} rounds x {args.samples} samples, batches of {args.batch}, {args.dim}-d, "
        f"{args.queries} queries per sample"
    )
    print(
        f"{'operation':<10} {'raw ms':>9} {'memcore ms':>11} {'ratio':>7} {'gap ms':>8} {'gap/call ms':>12}"
    )
    calls = {"add batch": 1, "query": args.queries, "get": 1, "delete": 1}
    for op in OPERATIONS:
        ours, theirs = times[op]["memcore"], times[op]["raw"]
        raw_ms = statistics.median(theirs) * 1000
        ours_ms = statistics.median(ours) * 1000
        ratio = statistics.median(m / r for m, r in zip(ours, theirs, strict=True))
        gap_ms = statistics.median(m - r for m, r in zip(ours, theirs, strict=True)) * 1000
        print(
            f"{op:<10} {raw_ms:>9.2f} {ours_ms:>11.2f} {ratio:>6.2f}x {gap_ms:>8.2f} "
            f"{gap_ms / calls[op]:>12.3f}"
        )
    print(f"({samples} samples per operation; ratio and gap are medians over paired samples)")


if __name__ == "__main__":
    main()
