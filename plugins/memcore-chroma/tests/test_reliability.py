"""The reliability battery (CI counts) on the embedded Chroma store and on a real Chroma server."""

from __future__ import annotations

import pytest
from chroma_server import ChromaServer

from memcore.testing.deployment import fork
from memcore.testing.reliability_tests import FORK_FAILURES, CrashTests, ReliabilityTests

# One add is one Chroma upsert, 15-35 ms of CPU (benchmarks/chroma_upsert.py): 8 writers of 40 adds
# still interleave with each other and the reader, in a third of 8 x 100's time.
CONCURRENCY_WRITES = 40


class TestChromaReliability(ReliabilityTests, CrashTests):
    url = "chroma://{tmp}"
    crash_batch = 400  # Chroma saves its HNSW files every 1,000 writes: let kills land in a save
    concurrency_writes = CONCURRENCY_WRITES


class TestChromaServerReliability(ReliabilityTests):
    """``chroma+http://`` on the session's ``chroma run``: a fresh collection per scenario
    (``{name}``), opened ``exclusive`` so that ``purge()`` rebuilds it (no other client uses it)."""

    url = ""
    concurrency_writes = CONCURRENCY_WRITES

    @pytest.fixture(autouse=True)
    def _server(self, chroma_server: ChromaServer) -> None:
        self.url = f"{chroma_server.url}?collection={{name}}&exclusive=true"

    def test_a_forked_child_reconnects_and_reads_only_its_own_scope(self) -> None:
        """Issue 20, item 2: the child makes a client of its own (refusing would also be safe, but
        a server store can do better), and neither side ever sees the other's records."""
        figures = fork(self.url, seconds=3.0)
        assert figures["child_reads"] > 0 and not figures["child_refused"], figures
        assert not {name: figures[name] for name in FORK_FAILURES if figures[name]}, figures
