"""Where a selective metadata filter's search spends its time in ``memory://`` (issue 25's 1 % target).

    .venv/bin/python benchmarks/memory_filter_breakdown.py --records 100000

Loads ``memcore bench``'s dataset (random 384-d vectors; ``metadata.bucket`` follows the owner, so
``bucket < 1`` selects one of a tenant's 100 owner partitions whole, ``bucket < 10`` ten) and
times, p50 over ``--searches`` calls of the same tenant-wide search with ``limit=10`` under the
filter ``bucket < --percent``:

- ``store.search`` as the bench calls it (the filter as a dict) and with the filter parsed once;
- the index's search alone (no scope check, vector validation or filter parsing);
- the public call with the store's search answering nothing at once: the public layer's own cost;
- the index's selection of partitions alone (the others ruled out on their bounds);
- the first selected partition's products with the query, and the numpy floor: the selected
  rows' products and their top 10, which is what the bench's floor column times, with BLAS's
  default threads (as the bench runs it) and on one thread (as the store's search runs BLAS).

``us_p50_after_a_scan`` times the same steps again, each call after an untimed scan of another
array as large as the rows the filter selects (its products with a query, on one BLAS thread,
as a search runs it): the state a search's steps find the CPU's caches in, where the previous
search's scan, or this one's, has just streamed its vectors through them. No timed step reads
that array, the floor included. It adds the ranking of one partition's products and ten hits
(records the index has cached, as the bench's are), and, when the filter selects one partition
(``--percent 1``), two sums of steps:

- ``sum_of_steps``: the public call with the store's search answering nothing (checking the
  scope, the query and the filter), the partition's choice, its products, their ranking and the
  ten hits: what a search through the public API does, step by step;
- ``least_public_search``: the first and the products alone (a search that checks its input and
  scans the rows, and does nothing else), to hold against twice the floor.

With more partitions selected, the per-partition steps time the first one only.

Prints JSON, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from memcore import Scope, open_store
from memcore.bench.dataset import TENANT, record
from memcore.bench.timing import sample
from memcore.filters import parse_filter
from memcore.queries import SearchQuery
from memcore.records import ScoredRecord
from memcore.stores.blas_threads import single_blas_thread
from memcore.stores.in_memory import InMemoryStore

DIM = 384


def _p50_us(call: Callable[[int], Any], searches: int, before: Callable[[int], Any] | None = None) -> float:
    return round(statistics.median(sample(call, searches, before=before)) * 1e3, 1)


def measure(records: int, percent: int, searches: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((records, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((100, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    store = open_store("memory://")
    assert isinstance(store, InMemoryStore)
    for start in range(0, records, 1000):
        stop = min(start + 1000, records)
        store.add([record(i) for i in range(start, stop)], vectors[start:stop])
    spec = {"metadata.bucket": {"$lt": percent}}
    node, tenant = parse_filter(spec), Scope(tenant=TENANT)
    index = store._index  # the breakdown times the layer under the public API on purpose
    partition = index.select(tenant, None, node)[0][0]
    floor_rows = vectors[np.arange(records) % 100 < percent]

    def query(i: int) -> Any:
        return queries[i % len(queries)]

    def floor(i: int) -> Any:
        return np.argpartition(-(floor_rows @ query(i)), 9)[:10]

    with threadpool_limits(limits=1, user_api="blas"):
        floor_one_thread = _p50_us(floor, searches)
    timings = {
        "records": records,
        "percent": percent,
        "us_p50": {
            "store_search_dict_filter": _p50_us(
                lambda i: store.search(tenant, vector=query(i), filter=spec, limit=10), searches
            ),
            "store_search_parsed_filter": _p50_us(
                lambda i: store.search(tenant, vector=query(i), filter=node, limit=10), searches
            ),
            "index_search": _p50_us(
                lambda i: index.search(tenant, SearchQuery(query(i)[None, :], None, node, 10), None), searches
            ),
            "index_select": _p50_us(lambda i: index.select(tenant, None, node), searches),
            "partition_products": _p50_us(
                lambda i: partition.vectors.products(query(i), partition.size), searches
            ),
            "numpy_floor": _p50_us(floor, searches),
            "numpy_floor_one_blas_thread": floor_one_thread,
        },
    }

    elsewhere = rng.standard_normal(floor_rows.shape).astype(np.float32)

    def scan(i: int) -> Any:
        with single_blas_thread():
            return elsewhere @ query(i + 1)

    products = partition.vectors.products(query(0), partition.size)
    best = np.argsort(-products)[:10].tolist()

    def rank(i: int) -> Any:
        top = np.argpartition(-products, 9)[:10]
        return top[np.argsort(-products[top], kind="stable")]

    after = {
        "store_search_parsed_filter": _p50_us(
            lambda i: store.search(tenant, vector=query(i), filter=node, limit=10), searches, before=scan
        ),
        "index_search": _p50_us(
            lambda i: index.search(tenant, SearchQuery(query(i)[None, :], None, node, 10), None),
            searches,
            before=scan,
        ),
        "index_select": _p50_us(lambda i: index.select(tenant, None, node), searches, before=scan),
        "partition_products": _p50_us(
            lambda i: partition.vectors.products(query(i), partition.size), searches, before=scan
        ),
        "rank_partition": _p50_us(rank, searches, before=scan),
        "ten_cached_hits": _p50_us(
            lambda i: [ScoredRecord.of(partition.record(row), 0.5) for row in best], searches, before=scan
        ),
    }
    with threadpool_limits(limits=1, user_api="blas"):
        after["numpy_floor_one_blas_thread"] = _p50_us(floor, searches, before=scan)
    store._search = lambda scope, query: []  # type: ignore[method-assign]
    timings["us_p50"]["store_search_engine_answering_nothing"] = _p50_us(
        lambda i: store.search(tenant, vector=query(i), filter=node, limit=10), searches
    )
    after["store_search_engine_answering_nothing"] = _p50_us(
        lambda i: store.search(tenant, vector=query(i), filter=node, limit=10), searches, before=scan
    )
    if len(index.select(tenant, None, node)) == 1:
        steps = ("index_select", "rank_partition", "ten_cached_hits")
        least = after["store_search_engine_answering_nothing"] + after["partition_products"]
        after["sum_of_steps"] = round(least + sum(after[step] for step in steps), 1)
        after["least_public_search"] = round(least, 1)
    timings["us_p50_after_a_scan"] = after
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--percent", type=int, default=1, help="the filter selects this share")
    parser.add_argument("--searches", type=int, default=3000)
    args = parser.parse_args(argv)
    json.dump(measure(args.records, args.percent, args.searches), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
