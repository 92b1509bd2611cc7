"""What SQLite planner statistics change in an embedded Chroma store's reads (memcore_chroma.planner).

    .venv/bin/python benchmarks/chroma_planner_statistics.py --tenants 1000

Builds a ``chroma://`` store of ``--tenants`` tenants of ``--records`` records (384-d random
vectors, memcore's own layout) with the statistics turned off, then copies the folder and gathers
them in the copy (``planner.analyze``, what the store does once it holds 1,000 entries and at each
doubling). In each folder it times, p50 over ``--repeats`` calls:

- raw chromadb ``get``s under the ``where`` documents memcore sends (a tenant's ids, an exact
  scope's ids, a range of ``created_at``, record ids), and a ``count``;
- memcore's own ``store.search`` of one tenant (the bench's many-tenants workload).

With ``--turns N``, it does the same for the bench's agent loop: two agents write ``N`` turns in
all (hash embedder: the embedding is not what is measured), then each ``get_context()`` after a
question is timed, ``--repeats`` of them, in a copy without and a copy with the statistics, and
(in the copy with them, a third time) each Chroma call a ``get_context()`` makes, by what it does:
milliseconds per context and calls per context.

The ratio ``without / with`` is the machine-independent figure. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
from memcore_chroma import ChromaStore, planner
from memcore_chroma.calls import CollectionCall
from memcore_chroma.store import ChromaStoreBase

from memcore.agent.memories import LongtermMemory
from memcore.bench.agent_loop import WORDS, conversation
from memcore.bench.timing import sample
from memcore.bench.workloads import add_tenants
from memcore.embedders.hashing import HashEmbedder
from memcore.records import Message
from memcore.scope import Scope

DIM = 384


def _p50_ms(call: Callable[[int], Any], repeats: int) -> float:
    """The first call opens segments and warms caches, not what a steady state pays: untimed."""
    return round(statistics.median(sample(call, repeats, warmup=1)), 2)


def build(folder: Path, tenants: int, records: int) -> float:
    """Fill a store at ``folder`` as the bench's many-tenants workload does, with no statistics
    gathered; the seconds it took."""
    planner.MIN_ENTRIES = sys.maxsize  # off while building: the copy gets them
    began = time.perf_counter()
    with ChromaStore(folder) as store:
        add_tenants(store, DIM, tenants, records, np.random.default_rng(1), lambda *_: None)
    return time.perf_counter() - began


def raw_reads(folder: Path, tenants: int, repeats: int) -> dict[str, float]:
    """Raw chromadb reads under the ``where`` documents memcore sends."""
    client = chromadb.PersistentClient(path=str(folder))
    try:
        return _timed_raw_reads(client.get_collection("memcore"), tenants, repeats)
    finally:
        client.close()  # type: ignore[attr-defined]  # before memcore opens the folder


def _timed_raw_reads(collection: Any, tenants: int, repeats: int) -> dict[str, float]:
    total = collection.count()
    newest = collection.get(offset=total - 50, limit=50, include=["metadatas"])["metadatas"] or []
    bound = min(int(meta["created_at"]) for meta in newest)
    exact_key = newest[0]["scope.key"]
    record_ids = [str(meta["record_id"]) for meta in newest[:10]]
    picks = np.random.default_rng(7).integers(0, tenants, repeats + 1)
    return {
        "tenant_ids_ms": _p50_ms(
            lambda i: collection.get(where={"scope.tenant": f"t{picks[i]}"}, include=[]), repeats
        ),
        "exact_scope_ids_ms": _p50_ms(
            lambda i: collection.get(where={"scope.key": exact_key}, include=[]), repeats
        ),
        "newest_by_time_ms": _p50_ms(
            lambda i: collection.get(
                where={"created_at": {"$gte": bound}}, include=["documents", "metadatas"]
            ),
            repeats,
        ),
        "record_ids_ms": _p50_ms(
            lambda i: collection.get(where={"record_id": {"$in": record_ids}}, include=[]), repeats
        ),
        "count_ms": _p50_ms(lambda i: collection.count(), repeats),
    }


def tenant_search(folder: Path, tenants: int, repeats: int) -> float:
    """memcore's ``search`` of one tenant, p50 in ms."""
    rng = np.random.default_rng(7)
    queries = rng.standard_normal((repeats + 1, DIM)).astype(np.float32)
    picks = rng.integers(0, tenants, repeats + 1)
    with ChromaStore(folder) as store:
        return _p50_ms(
            lambda i: store.search(Scope(tenant=f"t{picks[i]}"), vector=queries[i], limit=10), repeats
        )


def _memories(store: ChromaStore) -> list[LongtermMemory]:
    embedder = HashEmbedder()
    return [
        LongtermMemory(
            store, embedder, Scope(tenant="bench", user_id="u", agent_id=f"agent-{a}", session_id="s")
        )
        for a in (0, 1)
    ]


def build_agent_loop(folder: Path, turns: int) -> float:
    """Two agents' ``turns`` turns, written in pairs as the bench's agent loop does; seconds taken."""
    planner.MIN_ENTRIES = sys.maxsize
    began = time.perf_counter()
    with ChromaStore(folder) as store:
        memories = _memories(store)
        chats = [conversation(agent, turns // 4, seed=0) for agent in (0, 1)]
        for pair in range(turns // 4):
            for memory, chat in zip(memories, chats, strict=True):
                user, assistant = chat[pair]
                memory.write(
                    [Message(role="user", content=user), Message(role="assistant", content=assistant)]
                )
    return time.perf_counter() - began


def timed_contexts(
    folder: Path, repeats: int, calls: list[tuple[str, float]] | None = None
) -> dict[str, float]:
    """``get_context()`` after each of ``repeats`` questions, alternating agents: p50 and p99, ms.

    :param calls: if given, receives each Chroma call a timed ``get_context()`` made: its action
        and milliseconds.
    """
    with ChromaStore(folder) as store:
        memories = _memories(store)
        times = []
        for q in range(repeats + 2):
            memory = memories[q % 2]
            memory.write(
                [Message(role="user", content=f"question {q}: " + " ".join(WORDS[q % 20 : q % 20 + 4]))]
            )
            CALLS.clear()
            began = time.perf_counter()
            memory.get_context()
            times.append((time.perf_counter() - began) * 1000)
            if calls is not None and q >= 2:
                calls += CALLS
    kept = sorted(times[2:])  # the first of each agent opens segments and warms caches
    return {"get_context_p50_ms": round(statistics.median(kept), 2), "get_context_p99_ms": round(kept[-1], 2)}


CALLS: list[tuple[str, float]] = []
"""Every Chroma call the stores made since last cleared: what it did, milliseconds."""
_make = ChromaStoreBase._make


def _timed_make(store: ChromaStoreBase, call: CollectionCall) -> Any:
    began = time.perf_counter()
    try:
        return _make(store, call)
    finally:
        CALLS.append((call.action, (time.perf_counter() - began) * 1000))


ChromaStoreBase._make = _timed_make  # type: ignore[method-assign]


def per_context(calls: list[tuple[str, float]], contexts: int) -> dict[str, dict[str, float]]:
    """Milliseconds and calls per context, by action, most time first."""
    totals: dict[str, list[float]] = {}
    for action, ms in calls:
        totals.setdefault(action, []).append(ms)
    ranked = sorted(totals.items(), key=lambda item: -sum(item[1]))
    return {
        action: {"ms": round(sum(times) / contexts, 2), "calls": round(len(times) / contexts, 2)}
        for action, times in ranked
    }


def measure_agent_loop(turns: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memcore-planner-") as scratch:
        plain, analyzed = Path(scratch, "plain"), Path(scratch, "analyzed")
        built = build_agent_loop(plain, turns)
        shutil.copytree(plain, analyzed)
        planner.analyze(analyzed)
        result: dict[str, Any] = {"turns": turns, "build_s": round(built, 1)}
        # Alternating copies, twice each: the machine's drift falls on both.
        runs = {
            name: [timed_contexts(folder, repeats)]
            for name, folder in (("without", plain), ("with", analyzed))
        }
        for name, folder in (("without", plain), ("with", analyzed)):
            runs[name].append(timed_contexts(folder, repeats))
        for name, measured in runs.items():
            result[name] = {key: [run[key] for run in measured] for key in measured[0]}
        calls: list[tuple[str, float]] = []
        timed_contexts(analyzed, repeats, calls)
        result["with"]["calls_per_context"] = per_context(calls, repeats)
        return result


def measure(tenants: int, records: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memcore-planner-") as scratch:
        plain, analyzed = Path(scratch, "plain"), Path(scratch, "analyzed")
        built = build(plain, tenants, records)
        shutil.copytree(plain, analyzed)
        began = time.perf_counter()
        planner.analyze(analyzed)
        gathering = time.perf_counter() - began
        result: dict[str, Any] = {
            "tenants": tenants,
            "records_per_tenant": records,
            "build_s": round(built, 1),
            "gathering_s": round(gathering, 3),
        }
        for name, folder in (("without", plain), ("with", analyzed)):
            result[name] = {
                **raw_reads(folder, tenants, repeats),
                "memcore_tenant_search_ms": tenant_search(folder, tenants, repeats),
            }
        result["without_over_with"] = {
            key: round(result["without"][key] / result["with"][key], 1) for key in result["with"]
        }
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--records", type=int, default=100, help="records per tenant")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument(
        "--turns", type=int, default=0, help="also time the agent loop's get_context at N turns"
    )
    args = parser.parse_args()
    result = measure(args.tenants, args.records, args.repeats) if args.tenants else {}
    if args.turns:
        result["agent_loop"] = measure_agent_loop(args.turns, args.repeats)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
