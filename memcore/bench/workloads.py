"""The workloads ``memcore bench`` runs on each store, and the same queries on the floor.

Names follow VectorDBBench where it has one: insert (load) throughput, search
latency p50/p99 and QPS, filtered search at 1 %, 10 % and 50 % selectivity (here
both by scope and by a metadata filter), recall@10 against exact search, and
delete latency; plus a many-tenants workload (1,000 scopes of 100 records,
every query scoped) as agent memory in a multi-user service looks.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID, uuid4

import numpy as np

from memcore.bench.dataset import (
    SELECTIVITIES,
    TENANT,
    Dataset,
    filter_rows,
    record,
    scope_rows,
    selective_scope,
    text_bytes,
)
from memcore.bench.floor import ExactFloor
from memcore.bench.progress import Progress
from memcore.bench.rss import PeakRss
from memcore.bench.timing import sample, summary
from memcore.errors import MemcoreError
from memcore.plugin_manager import get_plugin_manager
from memcore.plugins import open_store
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store

BATCH = 1_000
K = 10


def fresh(url: str, folder: str, name: str | None = None) -> str:
    """``url`` with ``{tmp}`` replaced by ``folder`` and ``{name}`` by ``name``, by default a name no
    run used before (for a table or collection on a server: ``postgresql://host/db?collection={name}``)."""
    return url.replace("{tmp}", folder).replace("{name}", name or fresh_name())


def fresh_name() -> str:
    """A table or collection name no run used before: ``memcore_bench_`` and 12 hex digits."""
    return f"memcore_bench_{uuid4().hex[:12]}"


@contextlib.contextmanager
def opened(url: str) -> Iterator[Store]:
    """Open ``url`` made :func:`fresh`; afterwards remove the temporary folder of ``{tmp}`` and
    have the store's plugin drop the table or collection of ``{name}`` (:func:`discard`)."""
    with tempfile.TemporaryDirectory(prefix="memcore-bench-") as folder:
        name = fresh_name()
        made = fresh(url, folder + "/store", name)
        store = open_store(made)
        try:
            yield store
        finally:
            try:
                store.close()
            finally:
                if "{name}" in url and "{tmp}" not in url:
                    discard(made, name)


def discard(url: str, name: str) -> None:
    """Have the plugin of ``url`` drop the table or collection ``name`` a run made there
    (``memcore_bench_discard`` hook); warn, rather than raise, when it is left behind."""
    scheme = url.partition(":")[0]
    try:
        dropped = get_plugin_manager().hook.memcore_bench_discard(url=url, name=name)
    except MemcoreError as exc:
        warnings.warn(f"memcore bench: could not drop {name} ({exc}); remove it yourself", stacklevel=2)
        return
    if dropped is None:
        warnings.warn(
            f"memcore bench: no plugin drops {name} from a {scheme} store; remove it yourself", stacklevel=2
        )
    elif not dropped:
        warnings.warn(
            f"memcore bench: {name} is not the {scheme} store's table or collection, so nothing was dropped",
            stacklevel=2,
        )


def insert(store: Store, dataset: Dataset, progress: Progress) -> tuple[bytes, float]:
    """Write every record with its vector in batches; return the ids by row (16 bytes each, see
    :func:`id_list`) and records per second.

    The ids are kept as bytes while the load's peak memory is measured: a list of ``UUID`` objects
    (about 108 bytes each) was the bench's own memory, 10 MiB at 100,000 records, counted as the store's.
    """
    ids = bytearray()
    seconds = 0.0
    for start in range(0, dataset.size, BATCH):
        stop = min(start + BATCH, dataset.size)
        records = [record(i) for i in range(start, stop)]
        began = time.perf_counter()
        store.add(records, dataset.vectors[start:stop])
        seconds += time.perf_counter() - began
        ids += b"".join(r.id.bytes for r in records)
        progress("insert", stop, dataset.size)
    return bytes(ids), dataset.size / seconds


def id_list(ids: bytes) -> list[UUID]:
    """The ids :func:`insert` returned, as ``UUID`` objects by row."""
    return [UUID(bytes=ids[at : at + 16]) for at in range(0, len(ids), 16)]


def search_workloads(
    store: Store, dataset: Dataset, ids: list[UUID], queries: int, progress: Progress
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Search latency (whole tenant, by scope, by filter) for the store and the floor, and recall@10."""
    store_results: dict[str, Any] = {}
    floor_results: dict[str, Any] = {}
    cases: list[tuple[str, Callable[[int], Scope], dict[str, Any] | None, Callable[[int], Any]]] = [
        ("all", lambda i: Scope(tenant=TENANT), None, lambda i: np.arange(dataset.size))
    ]
    for percent in SELECTIVITIES:
        cases.append((f"scope-{percent}%", _scope_of(percent), None, _rows_of(percent, dataset.size)))
        rows = filter_rows(percent, dataset.size)
        cases.append(
            (
                f"filter-{percent}%",
                lambda i: Scope(tenant=TENANT),
                {"metadata.bucket": {"$lt": percent}},
                _fixed(rows),
            )
        )
    position = {record_id: row for row, record_id in enumerate(ids)}
    for done, (name, scope_for, spec, rows_for) in enumerate(cases, 1):
        # Scoped cases see other rows per query variant; the others one fixed set (gathered once:
        # at a million records a copy is 1.5 GB). The store cycles through the same variants as
        # the floor: over more scopes its rows would leave the CPU's caches where the floor's stay.
        variants = min(queries, 4) if name.startswith("scope") else 1
        floors = {i: ExactFloor(dataset.vectors, rows_for(i)) for i in range(variants)}

        def run_store(
            i: int, scope_for: Callable[[int], Scope] = scope_for, spec: Any = spec, variants: int = variants
        ) -> Any:
            query = dataset.queries[i % len(dataset.queries)]
            return store.search(scope_for(i % variants), vector=query, filter=spec, limit=K)

        def run_floor(i: int, floors: dict[int, ExactFloor] = floors) -> Any:
            return floors[i % len(floors)].top(dataset.queries[i % len(dataset.queries)], K)

        store_results[name] = summary(sample(run_store, queries))
        floor_results[name] = summary(sample(run_floor, queries))
        if name == "all":
            store_results["recall_at_10"] = _recall(run_store, run_floor, position, queries)
        progress("search", done, len(cases))
    return store_results, floor_results


def _scope_of(percent: int) -> Callable[[int], Scope]:
    return lambda i: selective_scope(percent, i)


def _rows_of(percent: int, size: int) -> Callable[[int], Any]:
    return lambda i: scope_rows(percent, i, size)


def _fixed(rows: Any) -> Callable[[int], Any]:
    return lambda i: rows


def _recall(
    run_store: Callable[[int], Any], run_floor: Callable[[int], Any], position: dict[UUID, int], queries: int
) -> float:
    found = 0
    for i in range(queries):
        expected = set(run_floor(i).tolist())
        found += len({position[hit.record.id] for hit in run_store(i)} & expected)
    return round(found / (queries * K), 4)


def delete_latency(store: Store, ids: list[UUID], count: int) -> dict[str, float]:
    """Latency of deleting single records by id (scoped to their owner's tenant)."""
    victims = ids[:: max(1, len(ids) // count)][:count]
    return summary(sample(lambda i: store.delete(Scope(tenant=TENANT), [victims[i]]), len(victims), warmup=0))


def add_tenants(
    store: Store, dim: int, tenants: int, per_tenant: int, rng: np.random.Generator, progress: Progress
) -> None:
    """Add ``tenants`` scopes (``t0``, ``t1``, ... each with user ``u``) of ``per_tenant`` records
    with random vectors from ``rng``, a tenant a call."""
    for tenant in range(tenants):
        scope = Scope(tenant=f"t{tenant}", user_id="u")
        records = [
            MemoryRecord(scope=scope, message=Message(role="user", content=f"{tenant}-{i}"))
            for i in range(per_tenant)
        ]
        store.add(records, rng.standard_normal((per_tenant, dim)).astype(np.float32))
        progress("many tenants: insert", tenant + 1, tenants)


def many_tenants(
    url: str, dim: int, tenants: int, per_tenant: int, queries: int, progress: Progress
) -> dict[str, Any]:
    """Insert ``tenants`` scopes of ``per_tenant`` records, then time queries each scoped to one tenant."""
    rng = np.random.default_rng(1)
    with PeakRss() as memory, opened(url) as store:
        add_tenants(store, dim, tenants, per_tenant, rng, progress)
        vectors = rng.standard_normal((queries, dim)).astype(np.float32)
        picks = rng.integers(0, tenants, queries)
        result = summary(
            sample(lambda i: store.search(Scope(tenant=f"t{picks[i]}"), vector=vectors[i], limit=K), queries)
        )
    return {
        "tenants": tenants,
        "records_per_tenant": per_tenant,
        **result,
        "peak_rss_growth_mb": memory.growth_mb,
    }


def run_store(url: str, dataset: Dataset, queries: int, progress: Progress) -> dict[str, Any]:
    """Every workload on the store ``url`` names, and the floor's figures for the same queries."""
    with opened(url) as store:
        # Measured over the load alone: the searches' floor keeps its own copies of vectors.
        with PeakRss() as memory:
            packed_ids, rate = insert(store, dataset, progress)
        ids = id_list(packed_ids)
        searches, floor = search_workloads(store, dataset, ids, queries, progress)
        deletes = delete_latency(store, ids, min(100, dataset.size))
    return {
        "store": url,
        "size": dataset.size,
        "dim": dataset.dim,
        "insert_records_per_s": round(rate),
        "search": searches,
        "floor": floor,
        "delete": deletes,
        "peak_rss_growth_mb": memory.growth_mb,
        "data_bytes": dataset.vectors.nbytes + text_bytes(dataset.size),
    }
