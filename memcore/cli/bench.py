"""``memcore bench``: backends side by side on the same data, with the exact numpy floor."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, get_args

from memcore.agent.recall import RecallMode
from memcore.bench.agent_loop import run_agent_loop
from memcore.bench.concurrency import WORKLOADS, concurrency_table, run_concurrency
from memcore.bench.dataset import Dataset, npy_dataset, random_dataset
from memcore.bench.expiry import expiry_cost, expiry_table
from memcore.bench.locomo import run_locomo
from memcore.bench.overhead import adapter_overhead
from memcore.bench.progress import ProgressBars
from memcore.bench.report import locomo_table, markdown_table, write_json, write_plots
from memcore.bench.workloads import many_tenants, run_store
from memcore.errors import InvalidInputError
from memcore.plugins import open_embedder, store_classes

EMBEDDED_FORMS = {
    "memory": "memory://",
    "jsonl": "jsonl://{tmp}",
    "qdrant": "qdrant://{tmp}",
    "chroma": "chroma://{tmp}",
}
"""The embedded form of each store benchmarked by default, when its plugin is installed."""


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``bench`` command to the ``memcore`` parser."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark stores side by side against the exact-search floor",
        description="Insert, search (whole tenant, by scope and by filter at 1/10/50 % selectivity), "
        "recall@10 and delete on each store, the same queries on an exact numpy floor, and a "
        "many-tenants workload, adapter overhead against each plugin's raw client, and the agent loop. "
        "Writes results.json, results.md and PNG plots to --out.",
    )
    parser.add_argument(
        "--stores",
        help="comma-separated store URLs; {tmp} becomes a fresh folder, {name} a fresh table or "
        "collection name, as in postgresql://host/db?collection={name} "
        "(default: every installed store in its embedded form)",
    )
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated record counts")
    parser.add_argument("--dim", type=int, default=384, help="vector dimension for random data")
    parser.add_argument(
        "--data",
        default="random",
        help="'random', a .npy file of embeddings, or a LoCoMo .json (recall quality)",
    )
    parser.add_argument("--queries", type=int, default=200, help="queries per workload")
    parser.add_argument("--out", default="bench-results", help="folder for the outputs")
    parser.add_argument(
        "--agent-loop",
        type=int,
        default=10_000,
        metavar="TURNS",
        help="turns of the agent-loop workload (0: skip it)",
    )
    parser.add_argument(
        "--embedder",
        default="sentence-transformers/all-MiniLM-L6-v2",
        help="embedder of the agent-loop workload",
    )
    parser.add_argument(
        "--recall",
        choices=get_args(RecallMode),
        default="auto",
        help="how the agent loop's memories recall (default: the store's own default)",
    )
    parser.add_argument(
        "--concurrency",
        nargs="?",
        const="1,8,64",
        metavar="N,N,...",
        help="run only the concurrency workload: N agents on one event loop through the async API, "
        "beside the sync API on a thread pool of N (default agent counts: 1,8,64)",
    )
    parser.add_argument(
        "--expiry",
        action="store_true",
        help="run only the expiry workload: the same scoped searches on records without and with a TTL "
        "(one in ten expired), and the ratio of their p50 latencies (target: at most 1.1)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and few queries: a smoke run")
    parser.set_defaults(run=run)


def default_stores() -> list[str]:
    """The embedded form of every installed store scheme that has one."""
    installed = store_classes()
    return [url for scheme, url in EMBEDDED_FORMS.items() if scheme in installed]


def _dataset(args: argparse.Namespace, size: int, queries: int) -> Dataset:
    if args.data == "random":
        return random_dataset(size, args.dim, queries)
    path = Path(args.data)
    if path.suffix != ".npy":
        raise InvalidInputError(f"--data takes 'random', a .npy or a LoCoMo .json file, got {args.data!r}")
    return npy_dataset(path, size, queries)


def _machine() -> dict[str, Any]:
    versions = {}
    for name in (
        "memcore",
        "memcore-qdrant",
        "memcore-chroma",
        "numpy",
        "qdrant-edge-py",
        "qdrant-client",
        "chromadb",
        "sentence-transformers",
        "torch",
    ):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": versions,
        "command": " ".join(["memcore", *sys.argv[1:]]),
    }


def run(args: argparse.Namespace) -> int:
    """Run every workload on every store and size (or, with a LoCoMo ``--data``, the recall benchmark);
    print the table and write the outputs."""
    _check_bench_extra()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": _machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    with ProgressBars() as bars:
        if args.concurrency is not None:
            results["concurrency"] = _run_concurrency(args, bars)
        elif args.expiry:
            results["expiry"] = _run_expiry(args, bars)
        elif args.data.endswith(".json"):
            results["locomo"] = run_locomo(
                Path(args.data), open_embedder(args.embedder), bars.labelled("LoCoMo")
            )
        else:
            _run_workloads(args, results, bars)
    write_json(results, out)
    if "concurrency" in results:
        table = concurrency_table(results["concurrency"])
        outputs = "results.json, results.md"
    elif "expiry" in results:
        table = expiry_table(results["expiry"])
        outputs = "results.json, results.md"
    elif "locomo" in results:
        table = locomo_table(results["locomo"])
        outputs = "results.json, results.md"
    else:
        table = markdown_table(results)
        write_plots(results, out)
        outputs = "results.json, results.md, latency.png, selectivity.png, recall.png"
    (out / "results.md").write_text(table)
    print(table)
    print(f"outputs in {out}/: {outputs}")
    return 0


def _run_workloads(args: argparse.Namespace, results: dict[str, Any], bars: ProgressBars) -> None:
    sizes = [1_000, 5_000] if args.quick else [int(size) for size in args.sizes.split(",")]
    queries = 30 if args.quick else args.queries
    stores = args.stores.split(",") if args.stores else default_stores()
    results["runs"] = []
    for size in sizes:
        dataset = _dataset(args, size, queries)
        for url in stores:
            results["runs"].append(run_store(url, dataset, queries, bars.labelled(f"{url} {size}")))
    samples, batch = (6, 100) if args.quick else (20, 500)
    results["adapter_overhead"] = []
    for url in stores:
        overhead = adapter_overhead(url, dataset, samples, batch, bars.labelled(url))
        if overhead is not None:
            results["adapter_overhead"].append({"store": url, **overhead})
    tenants, per_tenant = (100, 20) if args.quick else (1_000, 100)
    results["many_tenants"] = [
        {"store": url, **many_tenants(url, args.dim, tenants, per_tenant, queries, bars.labelled(url))}
        for url in stores
    ]
    turns = min(args.agent_loop, 400) if args.quick else args.agent_loop
    if turns:
        embedder = open_embedder(args.embedder)
        questions = 20 if args.quick else 200
        results["agent_loop"] = [
            run_agent_loop(url, embedder, turns, questions, bars.labelled(url), recall_mode=args.recall)
            for url in stores
        ]


def _run_expiry(args: argparse.Namespace, bars: ProgressBars) -> list[dict[str, Any]]:
    sizes = [1_000, 5_000] if args.quick else [int(size) for size in args.sizes.split(",")]
    queries = 30 if args.quick else args.queries
    stores = args.stores.split(",") if args.stores else default_stores()
    return [
        expiry_cost(url, _dataset(args, size, queries), queries, bars.labelled(f"{url} {size}"))
        for size in sizes
        for url in stores
    ]


def _run_concurrency(args: argparse.Namespace, bars: ProgressBars) -> list[dict[str, Any]]:
    try:
        counts = [int(n) for n in args.concurrency.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise InvalidInputError(f"--concurrency takes agent counts such as 1,8,64, got {args.concurrency!r}")
    embedder = open_embedder(args.embedder)
    turns = 3 if args.quick else 10
    stores = args.stores.split(",") if args.stores else default_stores()
    return [
        run_concurrency(url, embedder, agents, turns, api, bars.labelled(url), workload)
        for url in stores
        for workload in WORKLOADS
        for agents in counts
        for api in ("async", "threads")
    ]


def _check_bench_extra() -> None:
    for module in ("rich", "matplotlib"):
        if importlib.util.find_spec(module) is None:
            raise InvalidInputError(
                f"memcore bench needs {module}: pip install 'memcore[bench]' (it brings rich and matplotlib)"
            )
