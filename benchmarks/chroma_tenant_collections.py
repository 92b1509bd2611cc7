"""What a collection per tenant would cost raw chromadb (no memcore in the loop).

    .venv/bin/python benchmarks/chroma_tenant_collections.py --tenants 1000

Issue 25 asks whether memcore-chroma should keep a collection per tenant, Chroma's own advice for
multi-tenancy, instead of one collection with the scope in each entry's metadata. This builds the
layout in a persistent client: ``--tenants`` collections of ``--records`` entries each (384-d, the
scope keys memcore writes), and times, in one tenant's collection:

- a ``query`` with no ``where`` (what a tenant-wide read would send);
- a ``query`` whose ``where`` names a value only this tenant's entries hold (its owner digest);
- a ``query`` whose ``where`` names a value every tenant's entries hold (a user id ``"u"``);
- a ``get`` of ids with that shared ``where``, and a ``get`` of every entry;
- opening a collection by name, and listing every collection (what an admin read fans out over).

It also reports how long creating and filling the collections took. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import chromadb
import numpy as np

DIM = 384


def _p50_ms(call: Callable[[], Any], repeats: int) -> float:
    call()  # the first call opens segments and warms caches: not what a steady state pays
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return round(statistics.median(times) * 1000, 2)


def _metadata(tenant: int, row: int) -> dict[str, Any]:
    """A turn's scope as memcore-chroma flattens it: ``scope.key`` is unique to the owner."""
    return {
        "scope.tenant": f"t{tenant}",
        "scope.user_id": "u",
        "scope.agent_id": "a",
        "scope.session_id": "s",
        "scope.key": f"t{tenant}-owner-digest",
        "created_at": row,
    }


def measure(tenants: int, records: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        client = chromadb.PersistentClient(path=folder)
        began = time.perf_counter()
        for tenant in range(tenants):
            collection = client.create_collection(f"tenant-{tenant}", metadata={"hnsw:space": "cosine"})
            collection.add(
                ids=[str(uuid.uuid4()) for _ in range(records)],
                embeddings=rng.standard_normal((records, DIM)).astype(np.float32),
                metadatas=[_metadata(tenant, row) for row in range(records)],
            )
        build_seconds = time.perf_counter() - began
        probe = tenants // 2
        collection = client.get_collection(f"tenant-{probe}")
        query = rng.standard_normal((1, DIM)).astype(np.float32)
        own = {"scope.key": f"t{probe}-owner-digest"}
        shared = {"scope.user_id": "u"}
        return {
            "chromadb": version("chromadb"),
            "tenants": tenants,
            "records_per_tenant": records,
            "build_s": round(build_seconds, 1),
            "build_ms_per_tenant": round(build_seconds / tenants * 1000, 1),
            "p50_ms": {
                "query_no_where": _p50_ms(lambda: collection.query(query, n_results=10), repeats),
                "query_where_tenant_unique": _p50_ms(
                    lambda: collection.query(query, n_results=10, where=own), repeats
                ),
                "query_where_shared_by_all": _p50_ms(
                    lambda: collection.query(query, n_results=10, where=shared), repeats
                ),
                "get_ids_where_shared_by_all": _p50_ms(
                    lambda: collection.get(where=shared, include=[]), repeats
                ),
                "get_all_embeddings_metadata": _p50_ms(
                    lambda: collection.get(include=["embeddings", "metadatas"]), repeats
                ),
                "get_collection": _p50_ms(lambda: client.get_collection(f"tenant-{probe}"), repeats),
                "list_collections": _p50_ms(lambda: client.list_collections(), max(3, repeats // 10)),
            },
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--records", type=int, default=100, help="entries per tenant's collection")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)
    json.dump(measure(args.tenants, args.records, args.repeats), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
