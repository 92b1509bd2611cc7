"""Conformance tests for ``search(keywords=...)``: BM25 ranking, scoped and filtered like every read."""

from __future__ import annotations

from typing import ClassVar

import pytest

from memcore.errors import InvalidInputError
from memcore.keywords import bm25_scores
from memcore.store import Store
from memcore.testing.helpers import StoreFixtures, make_record, new_scope, random_vectors

TEXTS = [
    "Caroline researched adoption agencies last week",
    "Melanie signed up for a pottery class",
    "We went camping at the beach with the kids",
    "The pottery workshop was relaxing; pottery is therapy",
    "Nothing in common here",
]


class KeywordSearchTests(StoreFixtures):
    """BM25 over the scope's own records: the ranking of :func:`memcore.keywords.bm25_scores`.

    Set ``keyword_scores_exact = False`` in a backend's test class when its engine
    normalises document length by a fixed average instead of the scope's (a sparse-vector
    BM25 cannot aggregate the scope): its scores then differ from the reference's, and only
    the ranking of these fixtures (which a fixed average of 5 to 20 terms keeps) is checked.
    """

    keyword_scores_exact: ClassVar[bool] = True

    def test_ranking_is_bm25_over_the_scope(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, text) for text in TEXTS]
        store.add(records, random_vectors(len(records)))
        expected = bm25_scores("pottery classes", TEXTS)
        assert expected[1] > expected[3] > 0, "two terms matched outrank one term repeated"
        hits = store.search(scope, keywords="pottery classes", limit=10)
        assert [h.record.id for h in hits] == [records[1].id, records[3].id]
        if self.keyword_scores_exact:
            assert [h.score for h in hits] == pytest.approx([expected[1], expected[3]])
        else:
            assert hits[0].score > hits[1].score > 0

    def test_other_scopes_neither_appear_nor_change_scores(self, store: Store) -> None:
        mine, theirs = new_scope(), new_scope()
        records = [make_record(mine, text) for text in TEXTS]
        store.add(records)
        before = store.search(mine, keywords="pottery", limit=10)
        store.add([make_record(theirs, "pottery pottery pottery") for _ in range(20)])
        after = store.search(mine, keywords="pottery", limit=10)
        assert [(h.record.id, h.score) for h in after] == [(h.record.id, h.score) for h in before]
        assert {h.record.scope for h in after} == {mine}

    def test_filter_limit_and_deletes(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, text, metadata={"i": i}) for i, text in enumerate(TEXTS)]
        store.add(records)
        hits = store.search(scope, keywords="pottery", filter={"metadata.i": {"$ne": 3}}, limit=10)
        assert [h.record.id for h in hits] == [records[1].id]
        assert len(store.search(scope, keywords="pottery", limit=1)) == 1
        store.delete(scope, [records[3].id])
        assert [h.record.id for h in store.search(scope, keywords="pottery", limit=10)] == [records[1].id]
        assert store.search(scope, keywords="the a of", limit=10) == [], "stop words alone match nothing"

    def test_keywords_do_not_combine_with_vector_or_text(self, store: Store) -> None:
        scope = new_scope()
        store.add([make_record(scope, "pottery")], random_vectors(1))
        for extra in ({"vector": random_vectors(1)[0]}, {"text": "pottery"}):
            with pytest.raises(InvalidInputError):
                store.search(scope, keywords="pottery", **extra)
        with pytest.raises(InvalidInputError):
            store.search(scope, keywords="  ")
