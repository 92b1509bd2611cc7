"""Recall of memcore-chroma's search of a large scope without a ``where``, against brute force.

    .venv/bin/python benchmarks/chroma_unfiltered_recall.py --records 4000 --dim 48 --share 0.5 \
        --limit 10 --seeds 1,2,3

A scope holding more than 256 entries is searched among the collection's nearest entries with no
``where`` (``memcore_chroma.reads.unfiltered_search``), which asks twice the collection's
``ef_search`` nearest. This fills an in-memory Chroma store with two tenants' records (``--share``
of them the searched tenant's; random vectors), asks ``--queries`` random queries, and counts the
true top-``limit`` hits (exact cosine over the tenant's vectors) each way misses: the store as it
is, the store asking only the over-fetch (4 x limit, at least 64; what it asked before), and the
search under the scope's ``where`` (the shortcut turned off). Prints JSON, a line per seed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import numpy as np
from memcore_chroma import reads, store
from memcore_chroma.deployments import ChromaMemoryStore

from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors


@contextmanager
def _asking_the_overfetch_alone() -> Iterator[None]:
    """The search as it was: the collection's ``ef_search`` not looked at."""
    saved = store.ef_search_of, reads.CHROMA_EF_SEARCH
    store.ef_search_of, reads.CHROMA_EF_SEARCH = (lambda collection: 0), 0
    try:
        yield
    finally:
        store.ef_search_of, reads.CHROMA_EF_SEARCH = saved


@contextmanager
def _under_the_where() -> Iterator[None]:
    """The shortcut answering nothing, so that Chroma searches under the scope's ``where``."""
    saved = reads.unfiltered_search

    def nothing(*args: object, **kwargs: object) -> reads.Session[None]:
        return None
        yield  # a session that makes no call

    reads.unfiltered_search = nothing  # type: ignore[assignment]
    try:
        yield
    finally:
        reads.unfiltered_search = saved


def run(records: int, dim: int, share: float, limit: int, queries: int, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    vectors = random_vectors(records, seed=seed, dim=dim)
    mine = rng.random(records) < share
    scope, other = Scope(tenant="searched", user_id="u"), Scope(tenant="other", user_id="u")
    stored = [make_record(scope if own else other, f"r{i}") for i, own in enumerate(mine)]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = np.flatnonzero(mine)
    asked = rng.standard_normal((queries, dim)).astype(np.float32)
    truths = [
        {stored[i].id for i in rows[np.argsort(-(unit[rows] @ (q / np.linalg.norm(q))))[:limit]]}
        for q in asked
    ]
    missed: dict[str, int] = {}
    with ChromaMemoryStore() as chroma:
        for start in range(0, records, 1_000):
            chroma.add(stored[start : start + 1_000], vectors[start : start + 1_000])
        for name, way in (
            ("unfiltered", nullcontext),
            ("unfiltered_overfetch_only", _asking_the_overfetch_alone),
            ("under_where", _under_the_where),
        ):
            with way():
                missed[name] = sum(
                    len(truth - {h.record.id for h in chroma.search(scope, vector=q, limit=limit)})
                    for q, truth in zip(asked, truths, strict=True)
                )
    return {
        "records": records,
        "dim": dim,
        "share": share,
        "limit": limit,
        "seed": seed,
        "true_hits": queries * limit,
        "missed": missed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4_000)
    parser.add_argument("--dim", type=int, default=48)
    parser.add_argument("--share", type=float, default=0.5)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--seeds", default="1,2,3")
    args = parser.parse_args()
    for seed in (int(s) for s in args.seeds.split(",")):
        print(json.dumps(run(args.records, args.dim, args.share, args.limit, args.queries, seed)))


if __name__ == "__main__":
    main()
