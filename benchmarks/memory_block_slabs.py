"""What cutting ``memory://``'s vector blocks from slabs changes in its searches (``BlockPool``).

    .venv/bin/python benchmarks/memory_block_slabs.py --records 1000000

Loads ``memcore bench``'s dataset (random 384-d vectors, 100 owners of one tenant) into a
``memory://`` store twice, each in its own process, alternating ``--pairs`` times: once with
each partition's whole blocks (its first too, once doubled to 1,024 rows) cut from slabs of
``SLAB_BLOCKS`` blocks (12 MB, which numpy asks the kernel to back with transparent huge pages)
and once with slabs of one block (1.5 MB: no huge pages, each block on its own as before
``BlockPool``). At 100,000 records each owner holds one block (1,000 records).
Each times, p50 over ``--searches`` calls, the bench's searches whose vectors leave the CPU's
caches: an agent's 10 % (cycling through four agents), the filter ``bucket < 10`` and the whole
tenant; and reports the process's ``AnonHugePages`` after loading.

The ratio ``one-block slabs / slabs`` per search is the machine-independent figure: how much of
a product's time went to address translation on 4 KB pages. Prints JSON, times in ms.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memcore.bench.timing import sample, summary

_ARM = "--arm"


def _p50_ms(call: Callable[[int], Any], count: int) -> float:
    return summary(sample(call, count))["p50_ms"]


def _huge_pages_kib() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def arm(slab_blocks: int, records: int, searches: int) -> dict[str, Any]:
    """One side, in this process: the store built with slabs of ``slab_blocks`` blocks, timed."""
    from memcore import Scope, open_store
    from memcore.bench.dataset import TENANT, random_dataset, selective_scope
    from memcore.bench.workloads import insert
    from memcore.stores import vector_blocks

    vector_blocks.SLAB_BLOCKS = slab_blocks
    dataset = random_dataset(records, 384, 100)
    store = open_store("memory://")
    insert(store, dataset, lambda *_: None)
    queries = dataset.queries
    del dataset  # only the store's vectors stay
    tenant = Scope(tenant=TENANT)
    agents = [selective_scope(10, variant) for variant in range(4)]
    spec = {"metadata.bucket": {"$lt": 10}}

    def query(i: int) -> Any:
        return queries[i % len(queries)]

    return {
        "slab_blocks": slab_blocks,
        "anon_huge_pages_mib": round(_huge_pages_kib() / 1024),
        "p50_ms": {
            "agent_10_percent": _p50_ms(
                lambda i: store.search(agents[i % 4], vector=query(i), limit=10), searches
            ),
            "filter_10_percent": _p50_ms(
                lambda i: store.search(tenant, vector=query(i), filter=spec, limit=10), searches
            ),
            "whole_tenant": _p50_ms(
                lambda i: store.search(tenant, vector=query(i), limit=10), max(10, searches // 10)
            ),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=1, help="alternations of the two sides")
    parser.add_argument(_ARM, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.arm is not None:
        json.dump(arm(args.arm, args.records, args.searches), sys.stdout)
        return 0
    from memcore.stores.vector_blocks import SLAB_BLOCKS

    runs: list[dict[str, Any]] = []
    for _ in range(args.pairs):
        for slab_blocks in (1, SLAB_BLOCKS):
            command = [sys.executable, __file__, _ARM, str(slab_blocks), "--records", str(args.records)]
            command += ["--searches", str(args.searches)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            runs.append(json.loads(done.stdout))
    ratios = {
        name: [
            round(alone["p50_ms"][name] / slabbed["p50_ms"][name], 2)
            for alone, slabbed in zip(runs[::2], runs[1::2], strict=True)
        ]
        for name in runs[0]["p50_ms"]
    }
    json.dump({"records": args.records, "runs": runs, "one_block_over_slabs": ratios}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
