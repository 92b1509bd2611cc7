"""The CI subset of the reliability battery, as a test class every store runs.

Subclass it with the store's URL (``{tmp}`` for a fresh folder)::

    class TestMyStoreReliability(ReliabilityTests):
        url = "mystore://{tmp}"
        durable = True   # also kill writers and test locks across processes

``benchmarks/reliability.py`` runs the same scenarios with the long-run counts.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from memcore.testing.crash import crash_loop, second_process
from memcore.testing.reliability import Figures, bad_input, concurrency, erasure, isolation

CRASH_FAILURES = ("failed_reopens", "lost", "duplicates", "phantoms", "partial_batches", "unsearchable")


def _failed(figures: Figures, *names: str) -> dict[str, int]:
    return {name: figures[name] for name in names if figures[name]}


class ReliabilityTests:
    """Isolation, bad input, erasure and concurrency; crashes and locks for durable stores."""

    url: ClassVar[str]
    durable: ClassVar[bool] = False

    def test_isolation(self) -> None:
        figures = isolation(self.url, examples=60)
        assert figures["examples"] == 60 and not _failed(figures, "leaks", "accepted"), figures

    def test_bad_input(self) -> None:
        figures = bad_input(self.url, examples=150)
        assert figures["examples"] == 150
        assert not _failed(figures, "untyped_errors", "accepted", "lost"), figures

    def test_erasure(self) -> None:
        figures = erasure(self.url, records=200, deletions=40)
        assert figures["deleted"] == 40
        assert not {name: count for name, count in figures.items() if name != "deleted" and count}, figures

    def test_concurrency(self) -> None:
        figures = concurrency(self.url, threads=8, writes=100)
        assert figures["writes"] == 800 and figures["reads"] > 0
        assert not _failed(figures, "lost", "untyped_errors", "not_acknowledged"), figures

    def test_crashes_lose_no_acknowledged_record(self) -> None:
        if not self.durable:
            pytest.skip("not durable: nothing survives a process, so there is nothing to crash")
        figures = crash_loop(self.url, kills=4)
        assert figures["kills"] == figures["reopened"] == 4, figures
        assert not _failed(figures, *CRASH_FAILURES) and figures["acknowledged"] > 0, figures

    def test_a_second_process_is_refused_and_a_killed_holder_leaves_no_stale_lock(self) -> None:
        if not self.durable:
            pytest.skip("not durable: no location another process could open")
        assert second_process(self.url) == {"second_open_locked": 1, "stale_lock_blocked": 0}
