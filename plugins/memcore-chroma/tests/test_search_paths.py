"""Which of Chroma's calls a vector search makes: a small selection ranked exactly, a large one
by Chroma's HNSW search, and the same hits either way."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from memcore_chroma import reads
from memcore_chroma.calls import CollectionCall
from memcore_chroma.store import ChromaStoreBase

from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors

SMALL, LARGE = Scope(tenant="small", user_id="u"), Scope(tenant="large", user_id="u")


def test_a_small_selection_is_ranked_exactly_and_a_large_one_by_hnsw(
    open_store: Callable[[], ChromaStoreBase], calls: list[CollectionCall], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "SMALL_SELECTION", 10)
    small = [make_record(SMALL, f"s{i}", minute=i, role="user" if i % 2 else "assistant") for i in range(8)]
    large = [make_record(LARGE, f"l{i}", minute=i) for i in range(40)]
    vectors = random_vectors(len(small) + len(large), seed=5)
    with open_store() as store:
        store.add(small, vectors[: len(small)])
        store.add(large, vectors[len(small) :])
        query = vectors[3]
        calls.clear()
        hits = store.search(SMALL, vector=query, filter={"role": "user"}, limit=3)
        assert hits[0].record == small[3] and all(h.record.message.role == "user" for h in hits)
        assert len(hits) == 3 and [c.method for c in calls] == ["get", "get", "get"]
        assert calls[1].kwargs["include"] == ["embeddings"]  # then documents of the best only
        assert all("ids" in c.kwargs and "where" not in c.kwargs for c in calls[1:])  # read by id
        for _ in range(2):
            calls.clear()
            assert store.search(LARGE, vector=vectors[len(small) + 7], limit=1)[0].record == large[7]
        # remembered as large: no listing; the nearest ids unfiltered, then their entries by id
        assert [c.method for c in calls] == ["query", "get"], "a large selection is remembered as large"
        store.delete(SMALL, [small[3].id])
        assert small[3] not in [h.record for h in store.search(SMALL, vector=query, limit=8)]
