"""What splitting a batch write into smaller upserts costs raw chromadb (no memcore in the loop).

    .venv/bin/python benchmarks/chroma_write_pages.py --batch 500 --pages 500,250,128,64,32

chromadb's Rust bindings hold the GIL for a whole insert (chroma-core/chroma#3873, #7692), so a
long embedded write stalls every thread of the process, an event loop's too (the xfail in
``plugins/memcore-chroma/tests/test_conformance.py``). Smaller upserts would shorten each stall.
This times a batch of ``--batch`` entries in memcore's entry shape, written into a persistent
collection of ``--size`` entries in pages of each size: the whole batch's time (median of
``--repeats``) and its longest single call (the longest stall). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from importlib.metadata import version
from typing import Any

import chromadb
import numpy as np
from chroma_upsert import DIM, DOCUMENT, memcore_shaped


def _write(collection: Any, rng: np.random.Generator, batch: int, page: int) -> tuple[float, float]:
    """Upsert ``batch`` new entries ``page`` at a time: (the batch's seconds, the longest call's)."""
    ids = [str(uuid.uuid4()) for _ in range(batch)]
    embeddings = rng.standard_normal((batch, DIM)).astype(np.float32)
    metadatas = [memcore_shaped(row) for row in range(batch)]
    longest = 0.0
    began = time.perf_counter()
    for start in range(0, batch, page):
        stop = min(start + page, batch)
        called = time.perf_counter()
        collection.upsert(
            ids=ids[start:stop],
            embeddings=embeddings[start:stop],
            documents=[DOCUMENT] * (stop - start),
            metadatas=metadatas[start:stop],
        )
        longest = max(longest, time.perf_counter() - called)
    return time.perf_counter() - began, longest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=500, help="entries one write holds")
    parser.add_argument("--pages", default="500,250,128,64,32", help="entries per upsert call")
    parser.add_argument("--size", type=int, default=5000, help="entries in the collection before timing")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        collection = chromadb.PersistentClient(folder).create_collection(
            "pages", metadata={"hnsw:space": "cosine"}
        )
        for _ in range(0, args.size, 500):
            _write(collection, rng, 500, 500)
        for page in (int(p) for p in args.pages.split(",")):
            runs = [_write(collection, rng, args.batch, page) for _ in range(args.repeats)]
            results.append(
                {
                    "page": page,
                    "batch_ms": round(statistics.median(total for total, _ in runs) * 1000),
                    "longest_call_ms": round(max(longest for _, longest in runs) * 1000),
                }
            )
    json.dump({"chromadb": version("chromadb"), "batch": args.batch, "pages": results}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
