"""The reliability battery on the built-in stores, with counts bounded for CI.

``benchmarks/reliability.py`` runs the same scenarios with the long-run counts of RELIABILITY.md.
"""

from __future__ import annotations

from memcore.testing.reliability import second_opener
from memcore.testing.reliability_tests import CrashTests, ReliabilityTests


class TestMemoryReliability(ReliabilityTests):
    url = "memory://"


class TestJsonlReliability(ReliabilityTests, CrashTests):
    url = "jsonl://{tmp}"


def test_a_second_open_of_a_jsonl_folder_in_one_process_is_refused_typed() -> None:
    figures = second_opener("jsonl://{tmp}")
    assert figures == {"lost": 0, "untyped_errors": 0, "second_open_refused": 1}, figures
