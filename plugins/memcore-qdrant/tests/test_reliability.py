"""The reliability battery (CI counts) on the embedded Qdrant store."""

from __future__ import annotations

from memcore.testing.reliability_tests import CrashTests, ReliabilityTests


class TestQdrantReliability(ReliabilityTests, CrashTests):
    url = "qdrant://{tmp}"
