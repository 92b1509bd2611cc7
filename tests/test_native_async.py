"""The kit for native async hooks: ``memcore.sessions`` and ``memcore.loop_bound``."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

from memcore.loop_bound import LoopBound
from memcore.sessions import arun_session, run_session
from memcore.workers import WorkerPool


def _decoding(started: threading.Event) -> Generator[str, Any, list[int]]:
    rows: list[int] = yield "select"
    started.set()
    time.sleep(0.3)  # decoding a large result, on a worker
    return rows


async def _rows(call: str) -> list[int]:
    return list(range(100))


def test_a_session_runs_the_same_through_both_drivers() -> None:
    pool = WorkerPool(1, "test-sessions")
    try:
        assert run_session(_decoding(threading.Event()), lambda call: list(range(100))) == list(range(100))
        session = _decoding(threading.Event())
        offloaded = asyncio.run(arun_session(session, _rows, pool.run, heavy=lambda rows: len(rows) > 50))
        assert offloaded == list(range(100))
    finally:
        pool.shutdown()


def test_cancelling_a_session_while_a_worker_decodes_its_result_cancels_the_caller() -> None:
    """Not a ValueError ("generator already executing") from closing the session under the worker,
    which a backend would report as a StoreError and asyncio.timeout would never see."""
    pool = WorkerPool(1, "test-sessions")
    started = threading.Event()

    async def main() -> None:
        reading = asyncio.create_task(
            arun_session(_decoding(started), _rows, pool.run, heavy=lambda rows: True)
        )
        await asyncio.to_thread(started.wait, 10)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading

    try:
        asyncio.run(main())
    finally:
        pool.shutdown()


async def _nothing(client: object) -> None:
    return None


def test_a_forked_child_never_waits_for_the_lock_a_parent_thread_held() -> None:
    bound: LoopBound[object] = LoopBound(object, _nothing)
    bound._lock.acquire()  # as if a parent thread were inside serves() or close() at the fork
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through its exit status
            status = 1
            try:
                signal.alarm(10)  # a hang fails the test instead of stalling it

                async def serves() -> bool:
                    return bound.serves()

                status = 0 if asyncio.run(serves()) is False else 2
                bound.close()
            finally:
                os._exit(status)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        bound._lock.release()


def test_closing_from_another_thread_while_the_loop_is_stuck_drops_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not a TimeoutError (no memcore error) after waiting for a loop that never gets to the close."""
    monkeypatch.setattr("memcore.loop_bound.CLOSE_TIMEOUT", 0.2)
    dropped: list[object] = []
    bound: LoopBound[object] = LoopBound(object, _nothing, dropped.append)
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()

    async def serves() -> bool:
        return bound.serves()

    try:
        assert asyncio.run_coroutine_threadsafe(serves(), loop).result(timeout=10)
        loop.call_soon_threadsafe(time.sleep, 1.0)  # the loop's thread is busy for a second
        started = time.monotonic()
        bound.close()
        assert time.monotonic() - started < 0.9 and len(dropped) == 1
    finally:
        loop.call_soon_threadsafe(loop.stop)
        running.join(timeout=10)
        loop.close()
