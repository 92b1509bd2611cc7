"""A check for a plugin's raw-client baseline: it must do the work the store does, no less.

A baseline that returned fewer hits, or ignored the scope, would flatter
memcore's adapter overhead. Plugins call :func:`check_raw_baseline` from a test.
"""

from __future__ import annotations

import tempfile
from uuid import UUID

from memcore.bench.dataset import TENANT, Dataset, random_dataset, record, selective_scope
from memcore.bench.overhead import OPERATIONS, adapter_overhead, raw_client
from memcore.bench.progress import no_progress
from memcore.bench.raw import RawClient
from memcore.bench.workloads import fresh
from memcore.plugins import open_store
from memcore.records import MemoryRecord
from memcore.scope import Scope


def check_raw_baseline(url: str) -> None:
    """Assert that the raw client for the store ``url`` names returns what the store returns.

    :param url: a store URL with ``{tmp}`` where a fresh folder goes (``qdrant://{tmp}``), or
        ``{name}`` where a fresh table or collection name goes, as ``memcore bench --stores``
        takes it. Also runs
        :func:`memcore.bench.overhead.adapter_overhead` on a tiny size.
    """
    dataset = random_dataset(400, 16, 6)
    records = [record(i) for i in range(dataset.size)]
    with tempfile.TemporaryDirectory() as folder:
        client = raw_client(fresh(url, folder + "/raw"))
        assert client is not None, f"no plugin offers a raw client for {url}"
        try:
            _compare(fresh(url, folder + "/store"), client, dataset, records)
        finally:
            client.close()
    overhead = adapter_overhead(url, dataset, samples=2, batch=20, progress=no_progress)
    assert overhead is not None
    for operation in OPERATIONS:
        assert overhead[operation]["ratio"] > 0 and overhead[operation]["raw_ms"] > 0


def _compare(store_url: str, client: RawClient, dataset: Dataset, records: list[MemoryRecord]) -> None:
    with open_store(store_url) as store:
        store.add(records, dataset.vectors)
        client.add(client.prepare(records, dataset.vectors))
        for number, query in enumerate(dataset.queries):
            scope = selective_scope((1, 10, 50)[number % 3], number)
            ours = [hit.record.id for hit in store.search(scope, vector=query, limit=10)]
            theirs = [UUID(document["id"]) for document in client.search(scope, query, 10)]
            assert ours == theirs, f"search in {scope} differs"
        owner, ids = Scope(tenant=TENANT), [r.id for r in records[:30]]
        assert sorted(UUID(d["id"]) for d in client.get(owner, ids)) == sorted(ids)
        assert client.get(Scope(tenant="elsewhere"), ids) == [], "the raw get ignores the scope"
        client.delete(Scope(tenant="elsewhere"), ids)
        assert len(client.get(owner, ids)) == len(ids), "the raw delete ignores the scope"
        client.delete(owner, ids)
        assert client.get(owner, ids) == []
