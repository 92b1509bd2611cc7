"""The reliability battery with long-run counts: prints the figures RELIABILITY.md reports.

    .venv/bin/python benchmarks/reliability.py                      # every installed store, full counts
    .venv/bin/python benchmarks/reliability.py --stores 'jsonl://{tmp}' --scale 0.1

Each scenario is in memcore.testing.reliability / memcore.testing.crash (the CI tests run the same
code with small counts). Every figure named after a failure (lost, leaks, untyped_errors...) must
be 0; the script exits with status 1 if one is not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from memcore.plugins import store_classes
from memcore.testing.crash import crash_loop, second_process
from memcore.testing.reliability import Figures, bad_input, concurrency, erasure, isolation

EMBEDDED = {
    "memory": "memory://",
    "jsonl": "jsonl://{tmp}",
    "qdrant": "qdrant://{tmp}",
    "chroma": "chroma://{tmp}",
}
DURABLE = {"jsonl", "qdrant", "chroma"}
CRASH_BATCH = {"chroma": 400}
"""Records per killed writer's batch where the engine saves its index every 1,000 writes."""
KILLS_PER_STORE = {"chroma": 10}
"""Chroma rebuilds its index from its log at every unclean open (writer and verifier): smaller
stores keep each kill at a few seconds. Every kill is still a kill of a writer mid-batch."""
HEALTHY = {
    "rounds",
    "examples",
    "kills",
    "reopened",
    "acknowledged",
    "writes",
    "reads",
    "deleted",
    "typed_errors",
}
HEALTHY_PREFIXES = ("second_open_locked", "second_open_opened", "second_open_refused", "second_open_shared")


def _progress(url: str) -> Callable[[Figures], None]:
    """Prints the crash figures so far (after every 50 kills), so that a run cut short still reports."""
    started = time.monotonic()

    def report(figures: Figures) -> None:
        seconds = round(time.monotonic() - started, 1)
        print(f"{url:<16} {'crashes...':<12} {seconds:>7.1f} s  so far  {json.dumps(figures)}", flush=True)

    return report


def scenarios(scheme: str, scale: float) -> dict[str, Callable[[str], Figures]]:
    """The scenarios to run on a store of ``scheme``, with counts multiplied by ``scale``."""

    def n(count: int) -> int:
        return max(1, round(count * scale))

    chosen: dict[str, Callable[[str], Figures]] = {
        "isolation": lambda url: isolation(url, n(10_000)),
        "bad input": lambda url: bad_input(url, n(5_000)),
        "erasure": lambda url: erasure(url, records=n(5_000), deletions=n(1_000)),
        "small erasures": lambda url: _small_erasures(url, rounds=n(100)),
        "concurrency": lambda url: concurrency(url, threads=8, writes=n(1_000)),
    }
    if scheme in DURABLE:
        chosen["crashes"] = lambda url: crash_loop(
            url,
            kills=n(500),
            batch=CRASH_BATCH.get(scheme, 20),
            kills_per_store=KILLS_PER_STORE.get(scheme, 50),
            report=_progress(url),
        )
        chosen["locks"] = second_process
    return chosen


def _small_erasures(url: str, rounds: int) -> Figures:
    """The erasure scenario on ``rounds`` fresh stores of 200 records (40 deleted), figures summed.

    Stores this small keep Chroma's HNSW empty (under its sync threshold): the case in which chromadb
    wrote stale heap bytes, deleted records' among them, into its index files.
    """
    total: Figures = {"rounds": rounds}
    for seed in range(rounds):
        for name, count in erasure(url, records=200, deletions=40, seed=seed).items():
            total[name] = total.get(name, 0) + count
    return total


def failures(figures: Figures) -> dict[str, int]:
    """The figures that count failures and are not zero."""
    return {
        name: count
        for name, count in figures.items()
        if count and name not in HEALTHY and not name.startswith(HEALTHY_PREFIXES)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", help="comma-separated URLs with {tmp} (default: every installed store)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every count (0.01: smoke run)")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    installed = store_classes()
    urls = args.stores.split(",") if args.stores else [u for s, u in EMBEDDED.items() if s in installed]
    results: dict[str, dict[str, Any]] = {}
    failed = False
    for url in urls:
        scheme = url.split("://")[0]
        for name, scenario in scenarios(scheme, args.scale).items():
            if args.only and name not in args.only.split(","):
                continue
            started = time.monotonic()
            figures = scenario(url)
            seconds = round(time.monotonic() - started, 1)
            bad = failures(figures)
            failed |= bool(bad)
            results.setdefault(url, {})[name] = {**figures, "seconds": seconds}
            verdict = "FAIL " + json.dumps(bad) if bad else "ok"
            print(f"{url:<16} {name:<12} {seconds:>7.1f} s  {verdict}  {json.dumps(figures)}", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
