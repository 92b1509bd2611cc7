"""The whole conformance suite, against embedded Chroma and against a real Chroma server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from chroma_server import ChromaServer
from conftest import drop_collection
from memcore_chroma import (
    ChromaHttpStore,
    ChromaMemoryStore,
    ChromaStore,
    ExclusiveMaintenanceError,
    connection,
    urls,
)

from memcore.store import Store
from memcore.testing import AsyncStoreConformance, LifecycleTests, ManualClock, StoreConformance, StoreFactory
from memcore.testing.async_api import unwrapped
from memcore.testing.helpers import DIM, make_record, new_scope, random_vectors


class TestEmbeddedChroma(StoreConformance):
    """``chroma:///path``: a PersistentClient; each test has its own collection."""

    @pytest.fixture
    def store_factory(self, embedded_path: Path, collection_name: str) -> Iterator[StoreFactory]:
        yield lambda: ChromaStore(embedded_path, collection=collection_name)
        drop_collection(connection.persistent(embedded_path), collection_name)


class TestServerChroma(StoreConformance):
    """``chroma+http://``: the session's ``chroma run`` server; each test has its own collection."""

    @pytest.fixture
    def store_factory(self, chroma_server: ChromaServer, collection_name: str) -> Iterator[StoreFactory]:
        address = urls.ServerAddress("127.0.0.1", chroma_server.port, ssl=False)
        yield lambda: ChromaHttpStore(address, collection=collection_name)
        drop_collection(
            connection.http("127.0.0.1", chroma_server.port, False, address.tenant, address.database),
            collection_name,
        )

    def test_records_without_vectors_are_stored_but_not_vector_searchable(self, store: Store) -> None:
        """On a server, the first vector after stand-ins of another size needs an exclusive rebuild.

        (Rebuilding silently would lose other clients' concurrent writes; see the README.)
        """
        server = unwrapped(store)  # the store itself, not the async suite's wrapper
        assert isinstance(server, ChromaHttpStore)
        scope = new_scope()
        plain, with_vector = make_record(scope, "no vector"), make_record(scope, "has vector")
        store.add([plain])
        with pytest.raises(ExclusiveMaintenanceError):
            store.add([with_vector], random_vectors(1))
        server.rebuild_exclusively(dimension=DIM)
        store.add([with_vector], random_vectors(1))
        assert store.count(scope) == 2
        hits = store.search(scope, vector=random_vectors(1, seed=5)[0], limit=10)
        assert [h.record.id for h in hits] == [with_vector.id]

    def test_purge_sweeps_and_expired_records_stay_gone_after_reopen(
        self, store: Store, clock: ManualClock, store_factory: StoreFactory
    ) -> None:
        """On a server, ``purge()`` sweeps (deletes are safe there), then refuses the rebuild unless
        the store is exclusive; the suite's test then runs as ``?exclusive=true`` would have it
        (this test's collection has no other client, the promise ``exclusive`` makes)."""
        server = unwrapped(store)
        assert isinstance(server, ChromaHttpStore)
        scope = new_scope()
        store.add([make_record(scope, "expired")], ttl=5)
        clock.advance(6)
        with pytest.raises(ExclusiveMaintenanceError):
            store.purge()
        clock.now -= timedelta(seconds=60)
        assert store.count(scope) == 0, "swept before the rebuild was refused"
        server.rebuilds_safely = True
        base = LifecycleTests.test_purge_sweeps_and_expired_records_stay_gone_after_reopen
        base(self, store, clock, store_factory)


class TestMemoryChroma(StoreConformance):
    """``chroma+memory://``: an EphemeralClient, each store in a collection of its own."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return ChromaMemoryStore


class TestEmbeddedChromaAsync(AsyncStoreConformance):
    """The store tests through the async API, on embedded Chroma."""

    store_factory = TestEmbeddedChroma.store_factory

    @pytest.mark.xfail(
        strict=True,
        reason="chromadb's Rust bindings hold the GIL for a whole insert (they free it for reads "
        "only: chroma-core/chroma#3873, #7692), so a long embedded write stalls every thread, the "
        "event loop's too: 433 ms late for a 500-record add taking 373 ms. Smaller upserts are not the "
        "fix: in calls of 128 the batch took 21 % longer and still stalled 147 ms "
        "(benchmarks/chroma_write_pages.py).",
    )
    def test_the_loop_keeps_beating_while_a_long_call_runs(self, store: Store) -> None:
        super().test_the_loop_keeps_beating_while_a_long_call_runs(store)


class TestServerChromaAsync(AsyncStoreConformance):
    """The store tests through the async API, on the Chroma server."""

    store_factory = TestServerChroma.store_factory
    test_records_without_vectors_are_stored_but_not_vector_searchable = (
        TestServerChroma.test_records_without_vectors_are_stored_but_not_vector_searchable
    )
    test_purge_sweeps_and_expired_records_stay_gone_after_reopen = (
        TestServerChroma.test_purge_sweeps_and_expired_records_stay_gone_after_reopen
    )


class TestMemoryChromaAsync(AsyncStoreConformance):
    """The store tests through the async API, on an EphemeralClient."""

    store_factory = TestMemoryChroma.store_factory

    @pytest.mark.xfail(
        strict=False,
        reason="as for TestEmbeddedChromaAsync: the Rust insert holds the GIL, here for a varying part "
        "of the call (a beat 0.15-0.46 s late for 0.20-0.21 s adds, idle machine, and one run of three "
        "under half the call), so it passes now and then: not strict",
    )
    def test_the_loop_keeps_beating_while_a_long_call_runs(self, store: Store) -> None:
        super().test_the_loop_keeps_beating_while_a_long_call_runs(store)
