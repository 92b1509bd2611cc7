"""The reliability battery (CI counts) on the embedded Chroma store."""

from __future__ import annotations

from memcore.testing.reliability_tests import ReliabilityTests


class TestChromaReliability(ReliabilityTests):
    url = "chroma://{tmp}"
    durable = True
