"""What the expiry condition costs: the same scoped searches on records without and with a TTL.

Three stores of the same backend get the same records and vectors: ``no_ttl``, none expires;
``ttl``, every record has a time to live and none has expired yet (the state between two sweeps);
``expired``, the same and one in ten has expired (its clock is moved past them), so the condition
``expires_at > now`` hides rows. Their searches alternate, query by query. The ratios of the p50
latencies to ``no_ttl``'s are machine-independent: the target is at most 1.1 at 100,000 records.
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


VARIANTS = ("no_ttl", "ttl", "expired")


def _fill(store: Store, dataset: Dataset, variant: str, progress: Progress) -> None:
    for start in range(0, dataset.size, BATCH):
        stop = min(start + BATCH, dataset.size)
        rows = range(start, stop)
        if variant == "no_ttl":
            store.add([record(i) for i in rows], dataset.vectors[start:stop])
        else:
            for expiring, ttl in ((True, 60), (False, 86_400)):
                kept = [i for i in rows if (i % EXPIRED_EVERY == 0) == expiring]
                store.add([record(i) for i in kept], dataset.vectors[kept], ttl=ttl)
        progress("insert", stop, dataset.size)


def expiry_cost(url: str, dataset: Dataset, queries: int, progress: Progress) -> dict[str, Any]:
    """p50/p99 of each scoped search case in each variant on ``url``, and the p50 ratios to ``no_ttl``.

    Both stores stay open and their searches alternate, query by query, so that whatever else
    the machine does slows both alike.
    """
    with contextlib.ExitStack() as stack:
        stores = {variant: stack.enter_context(opened(url)) for variant in VARIANTS}
        clocks = {variant: ManualClock() for variant in VARIANTS}
        for variant, store in stores.items():
            store.clock = clocks[variant]
            _fill(store, dataset, variant, progress)
        clocks["expired"].advance(timedelta(minutes=2).total_seconds())
        expected = dataset.size - len(range(0, dataset.size, EXPIRED_EVERY))
        counts = [stores[variant].count(Scope(tenant=TENANT)) for variant in VARIANTS]
        if counts != [dataset.size, dataset.size, expected]:
            raise AssertionError(f"{url}: counts {counts}, expected the expired records hidden and no other")
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
    base = result["no_ttl"]
    result["ratio_p50"] = {
        variant: {case: round(result[variant][case]["p50_ms"] / base[case]["p50_ms"], 2) for case in CASES}
        for variant in VARIANTS[1:]
    }
    return result


def expiry_table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table: per case, the p50 of each variant and its ratio to ``no_ttl``."""
    lines = [
        "| store | records | case | no TTL p50 (ms) | TTLs, none expired | one in ten expired |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratios = row["ratio_p50"]
        for case in CASES:
            lines.append(
                f"| {row['store']} | {row['size']:,} | {case} | {row['no_ttl'][case]['p50_ms']} | "
                f"{row['ttl'][case]['p50_ms']} ({ratios['ttl'][case]}) | "
                f"{row['expired'][case]['p50_ms']} ({ratios['expired'][case]}) |"
            )
    return "\n".join(lines) + "\n"
