"""Scoped search through memcore-qdrant's embedded engines: Qdrant Edge against qdrant-client's local mode.

    .venv/bin/python benchmarks/qdrant_embedded.py --records 100000 --queries 200

Vectors are real all-MiniLM-L6-v2 embeddings (with ``--dim 384``, the default) of
the LoCoMo development turns (``../shared/data/locomo/locomo-dev.json``), padded
to ``--records`` with synthetic variations: a mix of two real turn embeddings
plus a little noise, renormalised. Queries are the embedded LoCoMo questions.
Records are spread over 10 users of one tenant, so each query's scope holds 10 %
of them. recall@10 compares each scoped search with exact numpy search over the
scope's vectors. Any other ``--dim`` uses random unit vectors instead.

qdrant-client's local mode is measured on ``--local-records`` records only: it
evaluates filters in Python, point by point, so it is slow to query at 100k.
Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from memcore_qdrant import QdrantStore
from threadpoolctl import threadpool_limits

import memcore
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store

USERS = 10
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo-dev.json"
Vectors = npt.NDArray[np.float32]


def _unit(rows: npt.NDArray[np.float64] | Vectors) -> Vectors:
    rows = np.asarray(rows, dtype=np.float32)
    unit: Vectors = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def locomo_texts(path: Path) -> tuple[list[str], list[str]]:
    """The turns (``"speaker: text"``, with the image caption) and the questions of the file."""
    turns: list[str] = []
    questions: list[str] = []
    for sample in json.loads(path.read_text()):
        conversation = sample["conversation"]
        for key, session in conversation.items():
            if key.startswith("session_") and isinstance(session, list):
                for turn in session:
                    caption = f" [image: {turn['blip_caption']}]" if turn.get("blip_caption") else ""
                    turns.append(f"{turn['speaker']}: {turn['text']}{caption}")
        questions += [qa["question"] for qa in sample["qa"]]
    return turns, questions


def dataset(records: int, dim: int, locomo: Path) -> tuple[list[str], Vectors, Vectors, str]:
    """Contents and unit vectors of ``records`` records, query vectors, and a description."""
    rng = np.random.default_rng(0)
    if dim != 384:
        vectors = _unit(rng.standard_normal((records, dim)))
        queries = _unit(rng.standard_normal((1_000, dim)))
        return [f"record {i}" for i in range(records)], vectors, queries, f"random {dim}-d unit vectors"
    turns, questions = locomo_texts(locomo)
    embedder = memcore.open_embedder("sentence-transformers/all-MiniLM-L6-v2")
    started = time.perf_counter()
    real = _unit(embedder.embed(turns))
    queries = _unit(embedder.embed(questions))
    embed_seconds = time.perf_counter() - started
    base = real[: min(records, len(real))]
    contents = turns[: len(base)]
    extra = records - len(base)
    if extra > 0:
        first, second = rng.integers(len(real), size=extra), rng.integers(len(real), size=extra)
        weight = rng.uniform(0.5, 1.0, size=(extra, 1)).astype(np.float32)
        noise = rng.standard_normal((extra, dim)).astype(np.float32) * 0.02
        synthetic = _unit(weight * real[first] + (1 - weight) * real[second] + noise)
        base = np.concatenate([base, synthetic])
        contents += [f"{turns[i]} (variation {n})" for n, i in enumerate(first)]
    description = (
        f"all-MiniLM-L6-v2 embeddings of {len(real)} LoCoMo turns ({embed_seconds:.1f} s to embed) "
        f"+ {max(extra, 0)} synthetic variations; queries: {len(queries)} LoCoMo questions"
    )
    return contents, base, queries, description


def _scope(user: int) -> Scope:
    return Scope(tenant="bench", user_id=f"u{user}")


def measure(
    store: Store, contents: list[str], vectors: Vectors, queries: Vectors, count: int
) -> dict[str, Any]:
    """Insert the records, then time ``count`` scoped searches and their recall@10."""
    records = [
        MemoryRecord(scope=_scope(i % USERS), message=Message(role="user", content=text))
        for i, text in enumerate(contents)
    ]
    started = time.perf_counter()
    for start in range(0, len(records), 1_000):
        store.add(records[start : start + 1_000], vectors[start : start + 1_000])
    insert_seconds = time.perf_counter() - started
    latencies, recalls = [], []
    rows_of = [np.flatnonzero(np.arange(len(records)) % USERS == user) for user in range(USERS)]
    for n in range(count):
        user, query = n % USERS, queries[n % len(queries)]
        begun = time.perf_counter()
        hits = store.search(_scope(user), vector=query, limit=10)
        latencies.append(time.perf_counter() - begun)
        rows = rows_of[user]
        with threadpool_limits(1):
            exact = rows[np.argsort(-(vectors[rows] @ query))[:10]]
        expected = {records[row].id for row in exact}
        recalls.append(len(expected & {h.record.id for h in hits}) / len(expected))
    ms = np.array(latencies) * 1_000
    return {
        "records": len(records),
        "scope_records": len(rows_of[0]),
        "insert_seconds": round(insert_seconds, 2),
        "insert_records_per_second": round(len(records) / insert_seconds),
        "queries": count,
        "scoped_search_p50_ms": round(float(np.percentile(ms, 50)), 3),
        "scoped_search_p99_ms": round(float(np.percentile(ms, 99)), 3),
        "recall_at_10": round(float(np.mean(recalls)), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records for Qdrant Edge")
    parser.add_argument(
        "--local-records", type=int, default=10_000, help="records for qdrant-client local mode"
    )
    parser.add_argument("--dim", type=int, default=384, help="384: real MiniLM embeddings; else random")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--local-queries", type=int, default=20)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--quick", action="store_true", help="10k records, 50 queries, 2k for local mode")
    args = parser.parse_args()
    if args.quick:
        args.records, args.queries, args.local_records, args.local_queries = 10_000, 50, 2_000, 10
    contents, vectors, queries, description = dataset(
        max(args.records, args.local_records), args.dim, args.locomo
    )
    results = []
    with tempfile.TemporaryDirectory() as folder:
        with QdrantStore.from_url(f"qdrant://{folder}/edge") as edge_store:
            edge = measure(
                edge_store, contents[: args.records], vectors[: args.records], queries, args.queries
            )
        results.append({"engine": "qdrant-edge (default: qdrant:///path)", **edge})
        with QdrantStore.open_local_client(Path(folder) / "local") as local_store:
            local = measure(
                local_store,
                contents[: args.local_records],
                vectors[: args.local_records],
                queries,
                args.local_queries,
            )
        results.append({"engine": "qdrant-client local mode (not used by any URL)", **local})
    report = {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "versions": {name: version(name) for name in ("memcore-qdrant", "qdrant-edge-py", "qdrant-client")},
        "data": description,
        "results": results,
        "target": {"scoped_search_p50_ms": 5.0, "recall_at_10": 0.99, "records": 100_000},
        "edge_meets_target": edge["scoped_search_p50_ms"] <= 5.0 and edge["recall_at_10"] >= 0.99,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
