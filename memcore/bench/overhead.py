"""Adapter overhead: a store against its plugin's raw client, the same operations in the same run.

Each sample writes one batch of records on both sides (memcore's store and the
raw client, each in its own folder), then runs scoped searches, a read by id
and a delete by id on both. The side that goes first alternates from sample to
sample, so that caches and drift favour neither. Per operation the result is
the median over samples of memcore's time over the raw client's: a ratio that
holds on a noisy machine, where absolute times do not (target: at most 1.10).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from memcore.bench.dataset import TENANT, Dataset, record, selective_scope
from memcore.bench.progress import Progress
from memcore.bench.raw import RawClient
from memcore.bench.workloads import K, fresh, opened
from memcore.plugin_manager import get_plugin_manager
from memcore.scope import Scope
from memcore.store import Store

OPERATIONS = ("add", "search", "get", "delete")
QUERIES_PER_SAMPLE = 10


def raw_client(url: str) -> RawClient | None:
    """The raw-client baseline a loaded plugin offers for ``url`` (``memcore_bench_raw_client``), if any."""
    client: RawClient | None = get_plugin_manager().hook.memcore_bench_raw_client(url=url)
    return client


def _seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def adapter_overhead(
    url: str, dataset: Dataset, samples: int, batch: int, progress: Progress
) -> dict[str, Any] | None:
    """Median time ratios of memcore over the raw client per operation; ``None`` without a baseline."""
    with tempfile.TemporaryDirectory(prefix="memcore-bench-raw-") as folder:
        client = raw_client(fresh(url, folder + "/raw"))
        if client is None:
            return None
        try:
            with opened(url) as store:
                times: dict[str, tuple[list[float], list[float]]] = {op: ([], []) for op in OPERATIONS}
                for number in range(samples):
                    _sample(store, client, dataset, number, batch, times)
                    progress("adapter overhead", number + 1, samples)
        finally:
            client.close()
    return {
        "samples": samples,
        "batch": batch,
        **{op: _summary(*times[op]) for op in OPERATIONS},
    }


def _sample(
    store: Store,
    client: RawClient,
    dataset: Dataset,
    number: int,
    batch: int,
    times: dict[str, tuple[list[float], list[float]]],
) -> None:
    rows = range(number * batch, (number + 1) * batch)
    records = [record(i) for i in rows]
    vectors = dataset.vectors[[i % dataset.size for i in rows]]
    prepared = client.prepare(records, vectors)
    scope = selective_scope(10, number)
    queries = [dataset.queries[(number + q) % len(dataset.queries)] for q in range(QUERIES_PER_SAMPLE)]
    some = [r.id for r in records[:: max(1, batch // 50)]]
    owner = Scope(tenant=TENANT)
    operations: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "add": (lambda: store.add(records, vectors), lambda: client.add(prepared)),
        "search": (
            lambda: [store.search(scope, vector=q, limit=K) for q in queries],
            lambda: [client.search(scope, q, K) for q in queries],
        ),
        "get": (lambda: store.get(owner, some), lambda: client.get(owner, some)),
        "delete": (lambda: store.delete(owner, some), lambda: client.delete(owner, some)),
    }
    raw_first = number % 2 == 1
    for op, (ours, theirs) in operations.items():
        if raw_first:
            times[op][1].append(_seconds(theirs))
            times[op][0].append(_seconds(ours))
        else:
            times[op][0].append(_seconds(ours))
            times[op][1].append(_seconds(theirs))


def _summary(ours: list[float], theirs: list[float]) -> dict[str, float]:
    return {
        "memcore_ms": round(statistics.median(ours) * 1_000, 3),
        "raw_ms": round(statistics.median(theirs) * 1_000, 3),
        "ratio": round(statistics.median(m / r for m, r in zip(ours, theirs, strict=True)), 3),
    }
