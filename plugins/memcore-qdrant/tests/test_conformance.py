"""memcore's whole conformance suite, on every embedded mode of the plugin.

``qdrant:///path`` and ``qdrant+memory://`` run Qdrant Edge, the default. The
third class drives the very code the ``qdrant+http(s)://`` server path uses
(:class:`~memcore_qdrant.client_engine.ClientEngine`) through qdrant-client's
local mode, since no Qdrant server can run here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from async_clients import native_local_store
from memcore_qdrant import QdrantMemoryStore, QdrantStore

from memcore.store import Store
from memcore.testing import AsyncStoreConformance, StoreConformance, StoreFactory

RAM_FOLDER = Path("/dev/shm")


def _roomy(folder: Path) -> bool:
    """Whether ``folder`` is a writable directory with more than 1 GiB free."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    return os.access(folder, os.W_OK) and stats.f_bavail * stats.f_frsize > 2**30


class TestEmbeddedStore(StoreConformance):
    """``qdrant:///path``: Qdrant Edge in a folder, reopened from the same folder."""

    keyword_scores_exact = False  # BM25 length-normalised by a fixed average (memcore_qdrant.keywords)

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda: QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}")


class TestInMemoryStore(StoreConformance):
    """``qdrant+memory://``: Qdrant Edge in a temporary folder, not durable."""

    keyword_scores_exact = False  # BM25 length-normalised by a fixed average (memcore_qdrant.keywords)

    @pytest.fixture
    def store_factory(self, monkeypatch: pytest.MonkeyPatch) -> StoreFactory:
        # The store uses $TMPDIR (a full /dev/shm would kill it with SIGBUS); the suite's few
        # small shards go to /dev/shm when it has ample room, sparing it the disk's fsyncs.
        if _roomy(RAM_FOLDER):
            monkeypatch.setattr(tempfile, "tempdir", str(RAM_FOLDER))
        return lambda: QdrantMemoryStore.from_url("qdrant+memory://")


class TestClientEngineOnLocalMode(StoreConformance):
    """The server path's engine, over qdrant-client's local mode."""

    keyword_scores_exact = False  # BM25 length-normalised by a fixed average (memcore_qdrant.keywords)

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda: QdrantStore.open_local_client(tmp_path / "local")


class TestEmbeddedStoreAsync(AsyncStoreConformance):
    """The store tests through the async API, on Qdrant Edge in a folder."""

    keyword_scores_exact = False
    store_factory = TestEmbeddedStore.store_factory


class TestInMemoryStoreAsync(AsyncStoreConformance):
    """The store tests through the async API, on Qdrant Edge in a temporary folder."""

    keyword_scores_exact = False
    store_factory = TestInMemoryStore.store_factory

    @pytest.mark.xfail(
        strict=False,
        reason="qdrant-edge-py holds the GIL for about half of a 2,000-point upsert: a beat 143 and "
        "152 ms late for 268 and 280 ms adds (limit: half the add) in 2 of 7 fresh-clone CI runs, "
        "with 0.9 ms of lateness with nothing in flight; it passes otherwise: not strict",
    )
    def test_the_loop_keeps_beating_while_a_long_call_runs(self, store: Store) -> None:
        super().test_the_loop_keeps_beating_while_a_long_call_runs(store)


class TestClientEngineOnLocalModeAsync(AsyncStoreConformance):
    """The store tests through the async API, on the server path's engine, its hooks awaited on
    the loop as a server store's are (:mod:`async_clients`)."""

    keyword_scores_exact = False

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda: native_local_store(tmp_path / "local")
