"""The reliability battery (CI counts) on the embedded Chroma store."""

from __future__ import annotations

from memcore.testing.reliability_tests import CrashTests, ReliabilityTests


class TestChromaReliability(ReliabilityTests, CrashTests):
    url = "chroma://{tmp}"
    crash_batch = 400  # Chroma saves its HNSW files every 1,000 writes: let kills land in a save
