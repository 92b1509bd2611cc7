"""The reliability battery (CI counts) on PostgreSQL: a table of its own per scenario."""

from __future__ import annotations

import pytest
from conftest import with_table

from memcore.testing.crash import crash_loop
from memcore.testing.reliability_tests import CRASH_FAILURES, ReliabilityTests


class TestPgvectorReliability(ReliabilityTests):
    """Isolation, bad input, erasure (the bytes on disk: ``test_store.py``) and concurrency.

    Not the lock scenario: several processes share one PostgreSQL database by design.
    """

    @pytest.fixture(autouse=True)
    def _server(self, postgres_uri: str) -> None:
        self.url = with_table(postgres_uri, "{name}")  # type: ignore[misc]  # set per test, not per class


def test_killed_writers_lose_no_acknowledged_record(postgres_uri: str) -> None:
    figures = crash_loop(with_table(postgres_uri, "{name}"), kills=4)
    assert figures["kills"] == 4
    assert {name: figures[name] for name in CRASH_FAILURES if figures[name]} == {}
