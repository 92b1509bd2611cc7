"""Many agents on one event loop: the async API against the sync API on a thread pool.

``N`` agents share one store, each with a memory of its own scope. In the ``memory`` workload each
writes a user and assistant turn and then asks ``get_context()``, ``turns`` times, all agents at
once. The same run is made twice, on fresh stores: through the async twins (``awrite``,
``aget_context``) and through the sync API on a thread pool of ``N`` (``run_in_executor``, as a
framework without async methods drives it). The ``store`` workload makes, per turn, the two store
reads a context needs, directly on the store (``asearch`` by a vector embedded beforehand and
``alist`` of the last ten): where a memory's twins run their logic on the store's workers, these
reach a server store's native async client. A heartbeat task, scheduled every millisecond on the
same loop, measures how late the loop runs while the agents work: the latency every other
coroutine of the process pays.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np

from memcore.agent.memories import LongtermMemory
from memcore.bench.agent_loop import conversation
from memcore.bench.progress import Progress
from memcore.bench.workloads import opened
from memcore.embedders.base import Embedder
from memcore.records import Message
from memcore.scope import Scope

Api = Literal["async", "threads"]
Workload = Literal["memory", "store"]
WORKLOADS: tuple[Workload, ...] = ("memory", "store")
HISTORY_PAIRS = 10
"""Turns each agent has written before the timed part (untimed), so contexts have a window and recall."""
HEARTBEAT_SECONDS = 0.001


def _percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 2) if values else 0.0


async def _heartbeat(stop: asyncio.Event, lateness: list[float], threads: list[int]) -> None:
    while not stop.is_set():
        due = time.perf_counter() + HEARTBEAT_SECONDS
        await asyncio.sleep(HEARTBEAT_SECONDS)
        lateness.append((time.perf_counter() - due) * 1_000)
        threads.append(threading.active_count())


async def _agents(
    memories: list[LongtermMemory], turns: int, api: Api, workload: Workload, embedder: Embedder
) -> tuple[list[float], float]:
    """Every agent's ``turns`` at once (a write then get_context, or the two store reads of a
    context); the latencies of get_context (or of the two reads) in milliseconds and the wall time
    in seconds."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    pool = ThreadPoolExecutor(len(memories), thread_name_prefix="bench-agent") if api == "threads" else None
    plans = [
        conversation(index, HISTORY_PAIRS + turns, seed=1)[HISTORY_PAIRS:] for index in range(len(memories))
    ]
    queries = embedder.embed([user for plan in plans for user, _ in plan]) if workload == "store" else None

    async def agent(index: int, memory: LongtermMemory) -> None:
        store, scope = memory.store, memory.scope
        for number, (user, assistant) in enumerate(plans[index]):
            turn = [Message(role="user", content=user), Message(role="assistant", content=assistant)]
            started = time.perf_counter()
            if queries is not None:
                query = queries[index * turns + number]
                if pool is None:
                    await store.asearch(scope, vector=query, limit=5)
                    await store.alist(scope, order="desc", limit=10)
                else:
                    await loop.run_in_executor(
                        pool, functools.partial(store.search, scope, vector=query, limit=5)
                    )
                    await loop.run_in_executor(
                        pool, functools.partial(store.list, scope, order="desc", limit=10)
                    )
            elif pool is None:
                await memory.awrite(turn)
                started = time.perf_counter()
                await memory.aget_context(query=user)
            else:
                await loop.run_in_executor(pool, memory.write, turn)
                started = time.perf_counter()
                await loop.run_in_executor(pool, functools.partial(memory.get_context, query=user))
            latencies.append((time.perf_counter() - started) * 1_000)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(agent(i, memory) for i, memory in enumerate(memories)))
    finally:
        if pool is not None:
            pool.shutdown()
    return latencies, time.perf_counter() - started


def run_concurrency(
    url: str,
    embedder: Embedder,
    agents: int,
    turns: int,
    api: Api,
    progress: Progress,
    workload: Workload = "memory",
) -> dict[str, Any]:
    """One run: ``agents`` agents, ``turns`` turns each of ``workload``, through ``api``, on a fresh store."""
    progress(f"{agents} agents, {api}, {workload}", 0, 1)
    with opened(url) as store:
        memories = [
            LongtermMemory(
                store, embedder, Scope(tenant="bench", user_id=f"user-{i}", agent_id="a"), window=10
            )
            for i in range(agents)
        ]
        for index, memory in enumerate(memories):
            for user, assistant in conversation(index, HISTORY_PAIRS, seed=1):
                memory.write(
                    [Message(role="user", content=user), Message(role="assistant", content=assistant)]
                )

        async def measured() -> tuple[list[float], float, list[float], list[int]]:
            stop, lateness, threads = asyncio.Event(), list[float](), list[int]()
            beating = asyncio.create_task(_heartbeat(stop, lateness, threads))
            try:
                latencies, seconds = await _agents(memories, turns, api, workload, embedder)
            finally:
                stop.set()
                await beating
            return latencies, seconds, lateness, threads

        latencies, seconds, lateness, threads = asyncio.run(measured())
    progress(f"{agents} agents, {api}, {workload}", 1, 1)
    return {
        "store": url,
        "workload": workload,
        "agents": agents,
        "api": api,
        "contexts": len(latencies),
        "contexts_per_s": round(len(latencies) / seconds, 1),
        "get_context_p50_ms": _percentile(latencies, 50),
        "get_context_p99_ms": _percentile(latencies, 99),
        "loop_lag_p99_ms": _percentile(lateness, 99),
        "loop_lag_max_ms": round(max(lateness, default=0.0), 2),
        "peak_threads": max(threads, default=threading.active_count()),
    }


def concurrency_table(rows: list[dict[str, Any]]) -> str:
    """The runs side by side: for each store, workload and agent count, async beside threads
    (``get_context`` columns: the two store reads' latency in the ``store`` workload)."""
    header = [
        "store",
        "workload",
        "agents",
        "api",
        "contexts/s",
        "get_context p50 ms",
        "p99 ms",
        "loop lag p99 ms",
        "threads",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["store"], row.get("workload", "memory"), str(row["agents"]), row["api"]]
        cells.append(f"{row['contexts_per_s']:.1f}")
        cells += [f"{row['get_context_p50_ms']:.1f}", f"{row['get_context_p99_ms']:.1f}"]
        cells += [f"{row['loop_lag_p99_ms']:.1f}", str(row["peak_threads"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
