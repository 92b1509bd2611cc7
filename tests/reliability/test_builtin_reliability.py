"""The reliability battery on the built-in stores, with counts bounded for CI.

``benchmarks/reliability.py`` runs the same scenarios with the long-run counts of RELIABILITY.md.
"""

from __future__ import annotations

from memcore.testing.reliability import second_opener
from memcore.testing.reliability_tests import ReliabilityTests


class TestMemoryReliability(ReliabilityTests):
    url = "memory://"


class TestJsonlReliability(ReliabilityTests):
    url = "jsonl://{tmp}"
    durable = True


def test_a_second_open_in_one_process_shares_the_jsonl_store() -> None:
    figures = second_opener("jsonl://{tmp}")
    assert figures["untyped_errors"] == figures["lost"] == 0, figures
