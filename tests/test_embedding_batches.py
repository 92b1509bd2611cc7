"""``aembed``: model inference off the event loop, with concurrent requests embedded in one call."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from memcore.embedders.base import OffLoopEmbedding
from memcore.embedders.cache import cached
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import InvalidInputError, PluginError
from memcore.validation import Matrix


class SlowModel(OffLoopEmbedding):
    """A model whose every call takes 50 ms, noting the batches it was given and its thread."""

    name = "slow"
    dim = 16

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.threads: set[int] = set()
        self._hash = HashEmbedder(dim=16)

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(list(texts))
        self.threads.add(threading.get_ident())
        time.sleep(0.05)
        return self._hash.embed(texts)


def test_concurrent_requests_share_calls_and_each_gets_its_own_rows() -> None:
    model = SlowModel()
    requests = [[f"agent {i} says {j}" for j in range(i % 3 + 1)] for i in range(20)]

    async def main() -> tuple[list[Matrix], int]:
        results = await asyncio.gather(*(model.aembed(texts) for texts in requests))
        return results, threading.get_ident()

    results, loop_thread = asyncio.run(main())
    for texts, rows in zip(requests, results, strict=True):
        np.testing.assert_array_equal(rows, HashEmbedder(dim=16).embed(texts))
    assert len(model.calls) <= 3, [len(call) for call in model.calls]  # 20 requests, not 20 calls
    assert sorted(t for call in model.calls for t in call) == sorted(t for texts in requests for t in texts)
    assert loop_thread not in model.threads and len(model.threads) == 1


def test_a_bad_request_fails_alone() -> None:
    model = SlowModel()

    async def main() -> list[Matrix | BaseException]:
        good = [model.aembed(["fine"]) for _ in range(3)]
        bad = model.aembed([1, "x"])  # type: ignore[list-item]
        return await asyncio.gather(*good, bad, return_exceptions=True)

    *good, bad = asyncio.run(main())
    assert isinstance(bad, InvalidInputError)
    assert all(isinstance(rows, np.ndarray) and rows.shape == (1, 16) for rows in good)


def test_a_cancelled_request_leaves_the_others_their_rows() -> None:
    model = SlowModel()

    async def main() -> list[Matrix]:
        first = asyncio.create_task(model.aembed(["occupies the model"]))
        await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(model.aembed([f"text {i}"])) for i in range(4)]
        await asyncio.sleep(0)
        waiting[1].cancel()
        done = await asyncio.gather(first, waiting[0], waiting[2], waiting[3])
        return list(done)

    rows = asyncio.run(main())
    assert [r.shape for r in rows] == [(1, 16)] * 4
    assert ["text 1"] not in model.calls and all("text 1" not in call for call in model.calls)


def test_a_model_returning_too_few_rows_is_a_plugin_error() -> None:
    class Short(SlowModel):
        def embed(self, texts: Sequence[str]) -> Matrix:
            return super().embed(texts)[:-1]

    with pytest.raises(PluginError):
        asyncio.run(Short().aembed(["a", "b"]))


def test_caches_in_front_of_one_model_share_its_worker_and_answer_hits_at_once() -> None:
    model = SlowModel()
    first, second = cached(model), cached(model)
    assert first is not second and first._batching_worker() is second._batching_worker()

    async def main() -> list[Matrix]:
        return list(await asyncio.gather(first.aembed(["a", "b"]), second.aembed(["b", "c"])))

    rows = asyncio.run(main())
    np.testing.assert_array_equal(rows[0][1], rows[1][0])
    calls = len(model.calls)
    asyncio.run(first.aembed(["a", "b"]))  # cached: answered without the model's worker
    assert len(model.calls) == calls
    assert first.stats().hits == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_embeds_with_a_worker_of_its_own() -> None:
    """A child forked while the parent's model was busy and a request waited must not wait for a
    flush that only the parent's thread would run."""
    model = SlowModel()

    async def in_flight() -> None:
        running = asyncio.create_task(model.aembed(["parent"]))
        await asyncio.sleep(0.01)  # the parent's first call is running (50 ms)
        waiting = asyncio.create_task(model.aembed(["parent, waiting"]))
        await asyncio.sleep(0)  # queued, its flush scheduled behind the running call
        pid = os.fork()
        if pid == 0:  # pragma: no cover - reports through its exit status
            code = 1
            try:
                rows = asyncio.run(asyncio.wait_for(model.aembed(["child"]), timeout=10))
                code = 0 if rows.shape == (1, 16) else 3
            except TimeoutError:
                code = 2
            finally:
                os._exit(code)
        await asyncio.gather(running, waiting)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0

    asyncio.run(in_flight())


def test_a_model_answering_with_plain_lists_or_failing_leaves_the_worker_working() -> None:
    class Lists(SlowModel):
        fail = False

        def embed(self, texts: Sequence[str]) -> Matrix:
            if self.fail:
                raise RuntimeError("model crashed")
            return [list(row) for row in super().embed(texts)]  # type: ignore[return-value]

    model = Lists()
    rows = asyncio.run(asyncio.wait_for(model.aembed(["a", "b"]), timeout=10))
    assert isinstance(rows, np.ndarray) and rows.shape == (2, 16)
    model.fail = True
    with pytest.raises(RuntimeError, match="model crashed"):
        asyncio.run(asyncio.wait_for(model.aembed(["c"]), timeout=10))
    model.fail = False
    assert asyncio.run(asyncio.wait_for(model.aembed(["d"]), timeout=10)).shape == (1, 16)


def test_one_text_many_callers_wait_for_is_embedded_once_per_call() -> None:
    model = SlowModel()

    async def main() -> list[Matrix]:
        return list(await asyncio.gather(*(model.aembed(["same query"]) for _ in range(8))))

    rows = asyncio.run(main())
    assert all(np.array_equal(r, rows[0]) for r in rows)
    assert sum(call.count("same query") for call in model.calls) <= 2  # the first call, then the rest


def test_a_flush_that_cannot_be_scheduled_fails_its_requests_and_the_next_one_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = SlowModel()
    worker = model._batching_worker()
    submit = worker._pool.submit
    failures = iter([RuntimeError("cannot schedule new futures after interpreter shutdown")])

    def failing_once(fn: object, *args: object) -> object:
        for failure in failures:
            raise failure
        return submit(fn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(worker._pool, "submit", failing_once)
    with pytest.raises(RuntimeError, match="interpreter shutdown"):
        asyncio.run(asyncio.wait_for(model.aembed(["first"]), timeout=10))
    assert asyncio.run(asyncio.wait_for(model.aembed(["second"]), timeout=10)).shape == (1, 16)


def test_a_text_that_makes_the_model_fail_fails_only_its_own_request() -> None:
    class Fragile(SlowModel):
        def embed(self, texts: Sequence[str]) -> Matrix:
            if "poison" in texts:
                raise RuntimeError("the model cannot embed this")
            return super().embed(texts)

    model = Fragile()

    async def main() -> list[Matrix | BaseException]:
        first = asyncio.create_task(model.aembed(["occupies the model"]))
        await asyncio.sleep(0.01)  # the others wait together, for one call
        others = [model.aembed(["fine 1"]), model.aembed(["poison"]), model.aembed(["fine 2"])]
        return [await first, *await asyncio.gather(*others, return_exceptions=True)]

    first, fine_1, poisoned, fine_2 = asyncio.run(main())
    assert isinstance(poisoned, RuntimeError)
    assert all(isinstance(rows, np.ndarray) and rows.shape == (1, 16) for rows in (first, fine_1, fine_2))
