"""The store conformance suite, as pytest mixins.

Every backend, built-in or plugin, runs all of it against the real engine::

    import pytest
    from memcore.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda: MyStore(tmp_path / "store")   # same location on every call

A backend opts out of a test only where it lacks a capability, and the skip
names that capability. Install with ``pip install memcore[testing]``.
"""

from memcore.testing.agent_memory_tests import AgentMemoryConformance
from memcore.testing.async_api import AsyncAPITests, AsyncStoreConformance
from memcore.testing.filter_tests import DifferentialFilterTests, FilterTests
from memcore.testing.helpers import StoreFactory, StoreFixtures
from memcore.testing.keyword_tests import KeywordSearchTests
from memcore.testing.lifecycle_tests import DifferentialLifecycleTests, LifecycleTests, ManualClock
from memcore.testing.safety_tests import BadInputTests, ClosedStoreTests, ScopeIsolationTests
from memcore.testing.store_tests import (
    AddTests,
    ConcurrencyTests,
    CountTests,
    DeleteTests,
    GetTests,
    ListTests,
    PersistenceTests,
    SearchTests,
    VectorSpaceTests,
)


class StoreConformance(
    AddTests,
    GetTests,
    ListTests,
    SearchTests,
    KeywordSearchTests,
    CountTests,
    DeleteTests,
    FilterTests,
    DifferentialFilterTests,
    ScopeIsolationTests,
    BadInputTests,
    ClosedStoreTests,
    PersistenceTests,
    ConcurrencyTests,
    VectorSpaceTests,
    LifecycleTests,
    DifferentialLifecycleTests,
    AgentMemoryConformance,
):
    """Every conformance test. Subclass it and override the ``store_factory`` fixture."""


__all__ = [
    "AddTests",
    "AgentMemoryConformance",
    "AsyncAPITests",
    "AsyncStoreConformance",
    "BadInputTests",
    "ClosedStoreTests",
    "ConcurrencyTests",
    "CountTests",
    "DeleteTests",
    "DifferentialFilterTests",
    "DifferentialLifecycleTests",
    "FilterTests",
    "GetTests",
    "KeywordSearchTests",
    "LifecycleTests",
    "ListTests",
    "ManualClock",
    "PersistenceTests",
    "ScopeIsolationTests",
    "SearchTests",
    "StoreConformance",
    "StoreFactory",
    "StoreFixtures",
    "VectorSpaceTests",
]
