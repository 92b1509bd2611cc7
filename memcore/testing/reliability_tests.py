"""The CI subset of the reliability battery, as test classes every store runs.

Subclass it with the store's URL (``{tmp}`` for a fresh folder), and a durable
store also :class:`CrashTests`::

    class TestMyStoreReliability(ReliabilityTests, CrashTests):
        url = "mystore://{tmp}"
        crash_batch = 400  # an engine that saves its index every 1,000 writes

``benchmarks/reliability.py`` runs the same scenarios with the long-run counts.
"""

from __future__ import annotations

from typing import ClassVar

from memcore.testing.crash import crash_loop, second_process
from memcore.testing.deployment import fork, limits, permissions
from memcore.testing.reliability import Figures, bad_input, concurrency, erasure, isolation
from memcore.testing.trust import ADAPTER_FAILURES, IMPORT_FAILURES, adapter_trust, import_trust

FORK_FAILURES = ("leaks", "untyped_errors", "lost", "resurrected", "parent_lost", "child_crashed")
CRASH_FAILURES = ("failed_reopens", "lost", "duplicates", "phantoms", "partial_batches", "unsearchable")


def _failed(figures: Figures, *names: str) -> dict[str, int]:
    return {name: figures[name] for name in names if figures[name]}


class ReliabilityTests:
    """Isolation, bad input, erasure and concurrency."""

    url: ClassVar[str]
    concurrency_writes: ClassVar[int] = 100
    """Single-record adds per writer (of 8) in the concurrency scenario: fewer for an engine whose
    one add takes tens of milliseconds."""

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
        figures = concurrency(self.url, threads=8, writes=self.concurrency_writes)
        assert figures["writes"] == 8 * self.concurrency_writes and figures["reads"] > 0
        assert not _failed(figures, "lost", "untyped_errors", "not_acknowledged"), figures

    def test_an_inherited_store_in_a_forked_child_is_correct_or_refused(self) -> None:
        figures = fork(self.url, seconds=1.0)
        assert figures["child_reads"] or figures["child_refused"], figures
        assert not _failed(figures, *FORK_FAILURES), figures

    def test_a_loose_folder_made_beforehand_ends_up_private(self) -> None:
        assert permissions(self.url) == {"readable_by_others": 0}

    def test_the_largest_inputs_work_and_one_past_each_is_refused_typed(self) -> None:
        figures = limits(self.url)
        assert not {name: count for name, count in figures.items() if count}, figures

    def test_adapters_read_and_delete_only_their_exact_scope_whatever_records_carry(self) -> None:
        figures = adapter_trust(self.url)
        # LangChain is part of the testing setup (memcore[langchain]); CAMEL runs in tests-camel.
        assert figures["langchain_checked"] == 1, "install memcore[langchain] to run the adapter scenario"
        assert figures["langgraph_checked"] == 1, "install memcore[langgraph] to run the adapter scenario"
        assert not _failed(figures, *ADAPTER_FAILURES), figures

    def test_an_import_refuses_every_line_outside_its_scope_and_writes_nothing_outside(self) -> None:
        figures = import_trust(self.url)
        assert figures["cases"] > 0 and not _failed(figures, *IMPORT_FAILURES), figures


class CrashTests:
    """For durable stores: killed writers and locks across processes."""

    url: ClassVar[str]
    crash_batch: ClassVar[int] = 20
    """Records per batch of the killed writer: large enough that kills can land in index saves."""

    def test_crashes_lose_no_acknowledged_record(self) -> None:
        figures = crash_loop(self.url, kills=4, batch=self.crash_batch)
        assert figures["kills"] == figures["reopened"] == 4, figures
        assert not _failed(figures, *CRASH_FAILURES) and figures["acknowledged"] > 0, figures

    def test_a_second_process_is_refused_and_a_killed_holder_leaves_no_stale_lock(self) -> None:
        assert second_process(self.url) == {"second_open_locked": 1, "stale_lock_blocked": 0}
