"""What the expiry condition costs: the same scoped searches on records without and with a TTL.

Two stores of the same backend get the same records and vectors; in the second, every record has
a time to live and one in ten has expired (the store's clock is moved past it), so every read
applies the condition ``expires_at > now`` and it hides rows. The searches of the two stores
alternate, query by query. The ratio of the p50 latencies, with over without, is
machine-independent: the target is at most 1.1 at 100,000 records.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta
from typing import Any

from memcore.bench.dataset import SELECTIVITIES, TENANT, Dataset, record, selective_scope
from memcore.bench.progress import Progress
from memcore.bench.timing import summary
from memcore.bench.workloads import BATCH, K, opened
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.lifecycle_tests import ManualClock

EXPIRED_EVERY = 10
"""One record in this many expires before the searches."""
CASES = ("all", *(f"scope-{percent}%" for percent in SELECTIVITIES))


def _scope(case: str, variant: int) -> Scope:
    if case == "all":
        return Scope(tenant=TENANT)
    return selective_scope(int(case.removeprefix("scope-").removesuffix("%")), variant)


def _fill(store: Store, dataset: Dataset, with_ttl: bool, progress: Progress) -> None:
    for start in range(0, dataset.size, BATCH):
        stop = min(start + BATCH, dataset.size)
        rows = range(start, stop)
        if not with_ttl:
            store.add([record(i) for i in rows], dataset.vectors[start:stop])
        else:
            for expiring, ttl in ((True, 60), (False, 86_400)):
                kept = [i for i in rows if (i % EXPIRED_EVERY == 0) == expiring]
                store.add([record(i) for i in kept], dataset.vectors[kept], ttl=ttl)
        progress("insert", stop, dataset.size)


def expiry_cost(url: str, dataset: Dataset, queries: int, progress: Progress) -> dict[str, Any]:
    """p50/p99 of each scoped search case without and with TTLs on ``url``, and their p50 ratios.

    Both stores stay open and their searches alternate, query by query, so that whatever else
    the machine does slows both alike.
    """
    with contextlib.ExitStack() as stack:
        stores = {label: stack.enter_context(opened(url)) for label in ("no_ttl", "ttl")}
        clock = ManualClock()
        for label, store in stores.items():
            store.clock = clock
            _fill(store, dataset, label == "ttl", progress)
        clock.advance(timedelta(minutes=2).total_seconds())
        expected = dataset.size - len(range(0, dataset.size, EXPIRED_EVERY))
        if stores["ttl"].count(Scope(tenant=TENANT)) != expected:
            raise AssertionError(f"{url}: the expired records are not hidden")
        samples: dict[str, dict[str, list[float]]] = {label: {} for label in stores}
        for case in CASES:
            for i in range(-3, queries):  # three untimed rounds first
                query = dataset.queries[i % len(dataset.queries)]
                for label, store in stores.items():
                    began = time.perf_counter()
                    store.search(_scope(case, i % 4), vector=query, limit=K)
                    if i >= 0:
                        samples[label].setdefault(case, []).append((time.perf_counter() - began) * 1_000)
    result: dict[str, Any] = {"store": url, "size": dataset.size}
    for label, cases in samples.items():
        result[label] = {case: summary(values) for case, values in cases.items()}
    result["ratio_p50"] = {
        case: round(result["ttl"][case]["p50_ms"] / result["no_ttl"][case]["p50_ms"], 2) for case in CASES
    }
    return result


def expiry_table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table: p50 without and with TTLs, and the ratio, per case."""
    lines = [
        "| store | records | case | p50 no TTL (ms) | p50 with TTL (ms) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        for case in CASES:
            lines.append(
                f"| {row['store']} | {row['size']:,} | {case} | {row['no_ttl'][case]['p50_ms']} | "
                f"{row['ttl'][case]['p50_ms']} | {row['ratio_p50'][case]} |"
            )
    return "\n".join(lines) + "\n"
