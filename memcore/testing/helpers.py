"""Fixtures and record builders shared by the conformance mixins.

A backend's test class subclasses :class:`~memcore.testing.StoreConformance`
(or single mixins) and overrides one fixture, ``store_factory``: a callable that
opens the store under test. For a durable store every call must open the *same*
location, so that the persistence tests can close and reopen it::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda: MyStore(tmp_path / "store")
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memcore.records import MemoryRecord, Message, MetadataValue, Role
from memcore.scope import Scope
from memcore.store import Store

DIM = 8
"""The vector dimension the conformance suite writes."""

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)

StoreFactory = Callable[[], Store]


def new_scope(**fields: str) -> Scope:
    """A scope with a tenant no other test uses, plus ``fields``."""
    return Scope(tenant=f"t-{uuid.uuid4().hex[:12]}", **fields)


def make_record(
    scope: Scope,
    content: str = "hello",
    *,
    role: Role = "user",
    kind: str = "turn",
    metadata: dict[str, MetadataValue] | None = None,
    minute: int | None = None,
) -> MemoryRecord:
    """A record; ``minute`` sets ``created_at`` to that many minutes after :data:`BASE_TIME`."""
    extra: dict[str, Any] = {}
    if minute is not None:
        extra["created_at"] = BASE_TIME + timedelta(minutes=minute)
    return MemoryRecord(
        scope=scope,
        message=Message(role=role, content=content),
        kind=kind,
        metadata=metadata or {},
        **extra,
    )


def random_vectors(count: int, seed: int = 0, dim: int = DIM) -> npt.NDArray[np.float32]:
    """``count`` random normal vectors (never zero), reproducible by ``seed``."""
    return np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)


def exact_cosine(vectors: npt.NDArray[np.float32], query: Sequence[float]) -> npt.NDArray[np.float64]:
    """Cosine similarity of each row with ``query``, in float64: the reference scores."""
    rows = np.asarray(vectors, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    scores: npt.NDArray[np.float64] = (rows @ q) / (np.linalg.norm(rows, axis=1) * np.linalg.norm(q))
    return scores


def ids(records: Sequence[MemoryRecord]) -> list[uuid.UUID]:
    """The ids of ``records``, in order."""
    return [record.id for record in records]


def snapshot(store: Store) -> list[dict[str, Any]]:
    """Every record in the store, in order, as plain data: to check that a call changed nothing."""
    return [record.model_dump(mode="json") for record in store.list(Scope.everything())]


class StoreFixtures:
    """The fixtures every conformance mixin uses. Override ``store_factory``."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """Return a callable that opens the store under test (the same location each call)."""
        raise NotImplementedError(f"{type(self).__name__} must override the store_factory fixture")

    @pytest.fixture
    def open_store(self, store_factory: StoreFactory) -> StoreFactory:
        """How the tests open (and reopen) the store: ``store_factory``, through the API under
        test (the async suite wraps it; see :mod:`memcore.testing.async_api`)."""
        return store_factory

    @pytest.fixture
    def store(self, open_store: StoreFactory) -> Iterator[Store]:
        """A freshly opened store, closed after the test."""
        opened = open_store()
        try:
            yield opened
        finally:
            opened.close()


def reopen(store: Store, store_factory: StoreFactory) -> Store:
    """Close ``store`` and open it again from its location."""
    store.close()
    return store_factory()


def require_durable(store: Store) -> None:
    """Skip, naming the missing capability, unless the store is durable."""
    if not store.capabilities.durable:
        pytest.skip(f"{store.name} lacks the capability 'durable'")


def require_text_search(store: Store) -> None:
    """Skip, naming the missing capability, unless the store supports text search."""
    if not store.capabilities.text_search:
        pytest.skip(f"{store.name} lacks the capability 'text_search'")
