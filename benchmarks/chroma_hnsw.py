"""Recall of Chroma's HNSW index against its settings, in raw chromadb (no memcore in the loop).

    .venv/bin/python benchmarks/chroma_hnsw.py --records 100000 --max-neighbors 32 --ef-construction 200

What ``memcore bench`` cannot show: how much of Chroma's recall on random vectors is
lost to the search (``ef_search``, which memcore-chroma's ``?ef_search=`` sets) and how
much to the graph (``max_neighbors`` and ``ef_construction``, fixed when a collection
is made). ``--records`` random 384-d unit vectors (``--dim``) are written in batches
of 1,000 with one metadata field, then ``--queries`` random unit queries are searched
with a ``where`` on that field (every record passes it, as a tenant-wide memcore
search); recall@10 compares each result with exact numpy search. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib.metadata import version

import chromadb
import numpy as np
import numpy.typing as npt
from memcore_chroma.connection import client_settings


def _unit(rows: int, dim: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    vectors = rng.standard_normal((rows, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--max-neighbors", type=int, default=16, help="Chroma's default: 16")
    parser.add_argument("--ef-construction", type=int, default=100, help="Chroma's default: 100")
    parser.add_argument("--ef-search", type=int, default=400, help="Chroma's default: 100")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vectors, queries = _unit(args.records, args.dim, rng), _unit(args.queries, args.dim, rng)
    hnsw = {
        "space": "cosine",
        "max_neighbors": args.max_neighbors,
        "ef_construction": args.ef_construction,
        "ef_search": args.ef_search,
    }
    with tempfile.TemporaryDirectory(prefix="memcore-chroma-hnsw-") as folder:
        client = chromadb.PersistentClient(path=folder, settings=client_settings())
        collection = client.create_collection("hnsw", configuration={"hnsw": hnsw}, embedding_function=None)
        ids = [str(i) for i in range(args.records)]
        started = time.perf_counter()
        for start in range(0, args.records, 1_000):
            rows = slice(start, start + 1_000)
            collection.add(ids=ids[rows], embeddings=vectors[rows], metadatas=[{"t": "x"}] * len(ids[rows]))
        inserting = time.perf_counter() - started
        recalls, latencies = [], []
        for query in queries:
            started = time.perf_counter()
            found = collection.query(query_embeddings=[query], n_results=10, where={"t": "x"})
            latencies.append(time.perf_counter() - started)
            exact = {str(i) for i in np.argsort(-(vectors @ query))[:10]}
            recalls.append(len(exact & set(found["ids"][0])) / 10)
        client.close()  # type: ignore[attr-defined]  # on chromadb's Client, not on ClientAPI
    print(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "chromadb": version("chromadb"),
                "hnsw": hnsw,
                "records": args.records,
                "insert_per_s": round(args.records / inserting),
                "recall_at_10": round(float(np.mean(recalls)), 3),
                "query_p50_ms": round(float(np.median(latencies)) * 1_000, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
