"""Conformance mixins for the store operations: add, get, list, search, count, delete.

Each class tests one operation of :class:`memcore.store.Store` against the
contract's documented semantics. Use them through
:class:`~memcore.testing.StoreConformance`, or one by one.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from uuid import UUID

import numpy as np
import pytest

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidInputError,
    InvalidRecordError,
    MemcoreError,
)
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store, VectorSpace
from memcore.testing.helpers import (
    BASE_TIME,
    DIM,
    StoreFactory,
    StoreFixtures,
    exact_cosine,
    ids,
    make_record,
    new_scope,
    random_vectors,
    reopen,
    require_durable,
    require_text_search,
)
from memcore.validation import MAX_LIMIT


class AddTests(StoreFixtures):
    """``add``: insert, upsert by id, round-trip, dimension fixing, id ownership."""

    def test_added_records_round_trip_exactly(self, store: Store) -> None:
        scope = new_scope(user_id="u1", agent_id="a1", session_id="s1")
        record = MemoryRecord(
            scope=scope,
            message=Message(role="assistant", content="Sure — 12 °C.", name="bot"),
            metadata={"n": 3, "x": 2.5, "flag": True, "tags": ["a", "b"], "s": "v"},
            kind="fact",
        )
        store.add([record], random_vectors(1))
        [stored] = store.get(scope, [record.id])
        assert stored == record
        assert stored.model_dump(mode="json") == record.model_dump(mode="json")

    def test_add_upserts_by_id(self, store: Store) -> None:
        scope = new_scope()
        first = make_record(scope, "old text")
        store.add([first], random_vectors(1, seed=1))
        replacement = first.model_copy(update={"message": Message(role="user", content="new text")})
        new_vector = random_vectors(1, seed=2)
        store.add([replacement], new_vector)
        assert store.count(scope) == 1
        assert [r.message.content for r in store.list(scope)] == ["new text"]
        [hit] = store.search(scope, vector=new_vector[0], limit=1)
        assert hit.record.id == first.id
        assert hit.score == pytest.approx(1.0, abs=1e-5)

    def test_records_without_vectors_are_stored_but_not_vector_searchable(self, store: Store) -> None:
        scope = new_scope()
        plain = make_record(scope, "no vector")
        with_vector = make_record(scope, "has vector")
        store.add([plain])
        store.add([with_vector], random_vectors(1))
        assert store.count(scope) == 2
        hits = store.search(scope, vector=random_vectors(1, seed=5)[0], limit=10)
        assert ids([h.record for h in hits]) == [with_vector.id]

    def test_first_vector_fixes_the_dimension(self, store: Store) -> None:
        scope = new_scope()
        store.add([make_record(scope)], random_vectors(1))
        assert store.dimension == DIM
        with pytest.raises(DimensionMismatchError):
            store.add([make_record(scope)], random_vectors(1, dim=DIM + 1))
        with pytest.raises(DimensionMismatchError):
            store.search(scope, vector=[1.0] * (DIM - 1))
        assert store.count(scope) == 1

    def test_an_id_used_in_another_scope_is_another_record(self, store: Store) -> None:
        """A record is (exact scope, id): another scope writing the same id neither learns that
        the id exists (no error) nor overwrites, blocks or reads the owner's record."""
        owner, intruder = new_scope(user_id="alice"), new_scope(user_id="bob")
        original = make_record(owner, "private", minute=1)
        store.add([original], random_vectors(1, seed=1))
        twin = original.model_copy(
            update={"scope": intruder, "message": Message(role="user", content="twin")}
        )
        store.add([twin], random_vectors(1, seed=2))
        assert store.get(owner, [original.id]) == [original]
        assert store.get(intruder, [original.id]) == [twin]
        assert store.count(owner) == store.count(intruder) == 1
        [hit] = store.search(owner, vector=random_vectors(1, seed=2)[0], limit=5)
        assert hit.record == original
        written = random_vectors(1, seed=1)[0]
        own_vector = store.vectors(owner, [original.id])[original.id]
        assert np.allclose(own_vector, written / np.linalg.norm(written), atol=1e-5)
        assert store.delete(intruder, [original.id]) == 1
        assert store.get(owner, [original.id]) == [original]
        assert store.get(intruder, [original.id]) == []

    def test_the_same_id_in_two_sessions_of_one_owner_is_two_records(self, store: Store) -> None:
        first = new_scope(user_id="u", agent_id="a", session_id="s1")
        second = Scope(tenant=first.tenant, user_id="u", agent_id="a", session_id="s2")
        owner_wide = Scope(tenant=first.tenant, user_id="u", agent_id="a")
        one = make_record(first, "one", minute=1)
        two = one.model_copy(update={"scope": second, "message": Message(role="user", content="two")})
        three = one.model_copy(update={"scope": owner_wide, "message": Message(role="user", content="three")})
        store.add([one, two, three], random_vectors(3))
        assert store.get(first, [one.id]) == [one]
        assert store.get(second, [one.id]) == [two]
        assert store.get(owner_wide.exact(), [one.id]) == [three]
        assert sorted(r.message.content for r in store.get(owner_wide, [one.id])) == ["one", "three", "two"]
        assert store.count(owner_wide) == 3
        assert store.delete(owner_wide, [one.id]) == 3
        assert store.count(Scope(tenant=first.tenant)) == 0

    def test_a_batch_with_a_repeated_id_is_refused_whole(self, store: Store) -> None:
        scope = new_scope()
        record = make_record(scope)
        with pytest.raises(InvalidRecordError):
            store.add([make_record(scope), record, record])
        assert store.count(scope) == 0

    def test_empty_batch_is_a_no_op(self, store: Store) -> None:
        store.add([])
        store.add([], [])
        assert store.count(Scope.everything()) == 0

    def test_large_batch(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, f"turn {i}", minute=i) for i in range(500)]
        store.add(records, random_vectors(500))
        assert store.count(scope) == 500
        assert ids(store.list(scope)) == ids(records)


class GetTests(StoreFixtures):
    """``get``: by id, in the order asked, scoped."""

    def test_get_returns_in_the_order_asked_and_skips_unknown_ids(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, str(i)) for i in range(4)]
        store.add(records)
        unknown = make_record(scope).id
        wanted: list[UUID | str] = [records[2].id, unknown, records[0].id, str(records[3].id), records[2].id]
        assert ids(store.get(scope, wanted)) == [records[2].id, records[0].id, records[3].id]

    def test_get_through_a_wider_scope(self, store: Store) -> None:
        scope = new_scope(user_id="u", session_id="s")
        record = make_record(scope)
        store.add([record])
        assert store.get(Scope(tenant=scope.tenant), [record.id]) == [record]
        assert store.get(Scope(tenant=scope.tenant, session_id="other"), [record.id]) == []
        assert store.get(Scope.everything(), [record.id]) == [record]

    def test_get_of_nothing(self, store: Store) -> None:
        assert store.get(new_scope(), []) == []

    def test_vectors_read_back_unit_length_within_the_scope(self, store: Store) -> None:
        scope, other = new_scope(user_id="u"), new_scope()
        records = [make_record(scope, str(i)) for i in range(3)]
        vectors = random_vectors(3, seed=11) * 7.0
        store.add(records, vectors)
        plain, outsider = make_record(scope, "no vector"), make_record(other, "other")
        store.add([plain])
        store.add([outsider], random_vectors(1, seed=12))
        wanted: list[UUID | str] = [str(records[2].id), records[0].id, plain.id, outsider.id, records[1].id]
        found = store.vectors(scope, wanted)
        assert set(found) == {records[0].id, records[1].id, records[2].id}
        for row, record in enumerate(records):
            assert found[record.id].dtype == np.float32
            unit = vectors[row] / np.linalg.norm(vectors[row])
            assert np.allclose(found[record.id], unit, atol=1e-5)
        assert store.vectors(Scope(tenant=scope.tenant, user_id="someone-else"), [records[0].id]) == {}
        assert set(store.vectors(Scope.everything(), [outsider.id, records[0].id])) == {
            outsider.id,
            records[0].id,
        }
        store.delete(scope, [records[0].id])
        assert set(store.vectors(scope, [records[0].id, records[1].id])) == {records[1].id}
        assert store.vectors(scope, []) == {}


class ListTests(StoreFixtures):
    """``list``: time order, limits, time bounds."""

    def test_list_orders_by_created_at(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, str(m), minute=m) for m in (5, 1, 3, 2, 4)]
        store.add(records)
        by_time = sorted(records, key=lambda r: r.created_at)
        assert ids(store.list(scope)) == ids(by_time)
        assert ids(store.list(scope, order="desc")) == ids(by_time[::-1])
        assert ids(store.list(scope, order="desc", limit=2)) == ids(by_time[::-1][:2])
        assert ids(store.list(scope, limit=2)) == ids(by_time[:2])

    def test_list_time_bounds_are_exclusive(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, str(m), minute=m) for m in range(6)]
        store.add(records)
        after = BASE_TIME + timedelta(minutes=1)
        before = BASE_TIME + timedelta(minutes=4)
        assert ids(store.list(scope, after=after, before=before)) == ids(records[2:4])
        assert ids(store.list(scope, after=after, order="desc", limit=1)) == [records[5].id]

    def test_list_rejects_a_bad_order(self, store: Store) -> None:
        with pytest.raises(InvalidInputError):
            store.list(new_scope(), order="newest")  # type: ignore[arg-type]

    def test_default_timestamps_keep_insertion_order(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, str(i)) for i in range(50)]
        for record in records:
            store.add([record])
        assert ids(store.list(scope)) == ids(records)


class SearchTests(StoreFixtures):
    """``search``: cosine similarity against exact numpy, text search, limits."""

    def test_vector_search_matches_exact_numpy(self, store: Store) -> None:
        scope = new_scope()
        vectors = random_vectors(300, seed=11)
        records = [make_record(scope, f"r{i}") for i in range(300)]
        store.add(records, vectors)
        for seed in range(5):
            query = random_vectors(1, seed=100 + seed)[0]
            expected = exact_cosine(vectors, query)
            order = np.argsort(-expected)[:10]
            hits = store.search(scope, vector=query, limit=10)
            assert len(hits) == 10
            if store.capabilities.ann:
                found = {h.record.id for h in hits} & {records[i].id for i in order}
                assert len(found) >= 9
            else:
                assert ids([h.record for h in hits]) == [records[i].id for i in order]
            position = {r.id: i for i, r in enumerate(records)}
            for hit in hits:
                assert hit.score == pytest.approx(expected[position[hit.record.id]], abs=1e-5)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    def test_scores_are_cosine_similarities(self, store: Store) -> None:
        scope = new_scope()
        same, opposite, orthogonal = (make_record(scope, c) for c in ("same", "opposite", "orthogonal"))
        base = [1.0] + [0.0] * (DIM - 1)
        store.add(
            [same, opposite, orthogonal],
            [[3.0] + [0.0] * (DIM - 1), [-2.0] + [0.0] * (DIM - 1), [0.0, 5.0] + [0.0] * (DIM - 2)],
        )
        hits = store.search(scope, vector=base, limit=3)
        assert [h.record.message.content for h in hits] == ["same", "orthogonal", "opposite"]
        assert [h.score for h in hits] == pytest.approx([1.0, 0.0, -1.0], abs=1e-5)

    def test_search_respects_limit(self, store: Store) -> None:
        scope = new_scope()
        store.add([make_record(scope) for _ in range(20)], random_vectors(20))
        query = random_vectors(1, seed=9)[0]
        assert len(store.search(scope, vector=query, limit=3)) == 3
        assert len(store.search(scope, vector=query, limit=MAX_LIMIT)) == 20

    def test_selective_filter_still_returns_limit_hits(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, metadata={"rare": i % 50 == 0}) for i in range(500)]
        store.add(records, random_vectors(500, seed=4))
        hits = store.search(
            scope, vector=random_vectors(1, seed=8)[0], filter={"metadata.rare": True}, limit=10
        )
        assert len(hits) == 10
        assert all(h.record.metadata["rare"] is True for h in hits)

    def test_search_before_any_vector_finds_nothing(self, store: Store) -> None:
        scope = new_scope()
        store.add([make_record(scope)])
        assert store.search(scope, vector=random_vectors(1)[0]) == []

    def test_search_needs_a_vector_or_a_text(self, store: Store) -> None:
        with pytest.raises(InvalidInputError):
            store.search(new_scope())
        with pytest.raises(InvalidInputError):
            store.search(new_scope(), text="   ")

    def test_text_search_is_case_insensitive_substring(self, store: Store) -> None:
        require_text_search(store)
        scope = new_scope()
        hit = make_record(scope, "My cat is called Mochi", minute=1)
        newer = make_record(scope, "MOCHI likes fish", minute=2)
        miss = make_record(scope, "The dog is called Rex", minute=3)
        store.add([hit, newer, miss])
        found = store.search(scope, text="mochi")
        assert ids([h.record for h in found]) == [newer.id, hit.id]
        assert all(h.score == 1.0 for h in found)
        assert store.search(scope, text="called mochi", limit=1)[0].record.id == hit.id

    def test_text_and_vector_together(self, store: Store) -> None:
        require_text_search(store)
        scope = new_scope()
        records = [make_record(scope, f"{'apple' if i % 2 else 'pear'} {i}") for i in range(40)]
        vectors = random_vectors(40, seed=21)
        store.add(records, vectors)
        query = random_vectors(1, seed=22)[0]
        hits = store.search(scope, vector=query, text="APPLE", limit=5)
        scores = exact_cosine(vectors, query)
        apples = sorted((i for i in range(40) if i % 2), key=lambda i: -scores[i])[:5]
        assert ids([h.record for h in hits]) == [records[i].id for i in apples]

    def test_unicode_content(self, store: Store) -> None:
        scope = new_scope()
        texts = ["Ärger über Äpfel", "日本語のテキスト", "emoji 🧠💾 ok", 'quotes " \\ \n newline', "עברית"]
        records = [make_record(scope, text, minute=i) for i, text in enumerate(texts)]
        store.add(records, random_vectors(len(records)))
        assert [r.message.content for r in store.list(scope)] == texts
        if store.capabilities.text_search:
            assert ids([h.record for h in store.search(scope, text="äPFEL")]) == [records[0].id]
            assert ids([h.record for h in store.search(scope, text="🧠")]) == [records[2].id]


class CountTests(StoreFixtures):
    """``count``: scoped, filtered."""

    def test_count(self, store: Store) -> None:
        scope = new_scope(user_id="u")
        store.add([make_record(scope, role="user") for _ in range(3)])
        store.add([make_record(scope, role="assistant") for _ in range(2)])
        store.add([make_record(new_scope()) for _ in range(4)])
        assert store.count(scope) == 5
        assert store.count(Scope(tenant=scope.tenant)) == 5
        assert store.count(scope, filter={"role": "assistant"}) == 2
        assert store.count(Scope(tenant=scope.tenant, user_id="nobody")) == 0


class DeleteTests(StoreFixtures):
    """``delete`` and ``delete_where``: addressed, scoped, idempotent, gone from every read path."""

    def test_deleted_record_is_gone_from_every_read_path(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, f"secret {i}") for i in range(5)]
        vectors = random_vectors(5)
        store.add(records, vectors)
        victim = records[2]
        assert store.delete(scope, [victim.id]) == 1
        assert store.get(scope, [victim.id]) == []
        assert victim.id not in ids(store.list(scope))
        assert victim.id not in [h.record.id for h in store.search(scope, vector=vectors[2], limit=10)]
        if store.capabilities.text_search:
            assert store.search(scope, text="secret 2") == []
        assert store.count(scope) == 4

    def test_delete_is_idempotent_and_counts_what_existed(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope) for _ in range(3)]
        store.add(records)
        unknown = make_record(scope).id
        assert store.delete(scope, [records[0].id, unknown, records[1].id]) == 2
        assert store.delete(scope, [records[0].id]) == 0
        assert store.delete(scope, []) == 0
        assert ids(store.list(scope)) == [records[2].id]

    def test_delete_cannot_reach_another_scope(self, store: Store) -> None:
        owner, other = new_scope(), new_scope()
        record = make_record(owner)
        store.add([record])
        assert store.delete(other, [record.id]) == 0
        assert store.delete(Scope(tenant=owner.tenant, user_id="x"), [record.id]) == 0
        assert store.get(owner, [record.id]) == [record]

    def test_a_deleted_id_can_be_reused(self, store: Store) -> None:
        scope, other = new_scope(), new_scope()
        record = make_record(scope, "first life")
        store.add([record], random_vectors(1))
        store.delete(scope, [record.id])
        reborn = record.model_copy(update={"scope": other})
        store.add([reborn], random_vectors(1))
        assert store.get(Scope.everything(), [record.id]) == [reborn]

    def test_delete_where(self, store: Store) -> None:
        scope, other = new_scope(), new_scope()
        keep = [make_record(scope, metadata={"topic": "work"}) for _ in range(3)]
        drop = [make_record(scope, metadata={"topic": "health"}) for _ in range(2)]
        elsewhere = [make_record(other, metadata={"topic": "health"})]
        store.add(keep + drop + elsewhere)
        assert store.delete_where(scope, {"metadata.topic": "health"}) == 2
        assert sorted(map(str, ids(store.list(scope)))) == sorted(map(str, ids(keep)))
        assert store.count(other) == 1
        assert store.delete_where(scope, {}) == 3
        assert store.count(scope) == 0
        assert store.count(other) == 1

    def test_delete_where_needs_a_filter(self, store: Store) -> None:
        with pytest.raises(InvalidInputError):
            store.delete_where(new_scope(), None)  # type: ignore[arg-type]


class PersistenceTests(StoreFixtures):
    """Durable stores: everything survives close and reopen. Skipped (named) for non-durable ones."""

    def test_records_vectors_and_deletes_survive_reopen(self, store: Store, open_store: StoreFactory) -> None:
        require_durable(store)
        scope = new_scope(user_id="u")
        records = [make_record(scope, f"r{i}", minute=i, metadata={"i": i}) for i in range(20)]
        vectors = random_vectors(20, seed=3)
        store.add(records, vectors)
        store.delete(scope, [records[4].id])
        store.add([records[5].model_copy(update={"kind": "fact"})], vectors[5:6])
        query = random_vectors(1, seed=4)[0]
        before = [(h.record.id, round(h.score, 5)) for h in store.search(scope, vector=query, limit=5)]
        reopened = reopen(store, open_store)
        try:
            assert reopened.dimension == DIM
            assert reopened.count(scope) == 19
            assert reopened.get(scope, [records[4].id]) == []
            assert reopened.get(scope, [records[5].id])[0].kind == "fact"
            assert [r.id for r in reopened.list(scope)] == [r.id for r in records if r is not records[4]]
            after = [(h.record.id, round(h.score, 5)) for h in reopened.search(scope, vector=query, limit=5)]
            assert after == before
            unit = vectors[7] / np.linalg.norm(vectors[7])
            assert np.allclose(reopened.vectors(scope, [records[7].id])[records[7].id], unit, atol=1e-5)
        finally:
            reopened.close()

    def test_records_of_one_id_in_two_scopes_survive_reopen_apart(
        self, store: Store, open_store: StoreFactory
    ) -> None:
        require_durable(store)
        first, second = new_scope(user_id="u"), new_scope(user_id="v")
        records = [make_record(first, "first", minute=1), make_record(first, "kept", minute=2)]
        twins = [r.model_copy(update={"scope": second}) for r in records]
        store.add(records + twins, random_vectors(4, seed=8))
        assert store.delete(second, [records[0].id]) == 1
        reopened = reopen(store, open_store)
        try:
            assert reopened.get(first, [records[0].id]) == [records[0]]
            assert reopened.get(second, [records[0].id]) == []
            assert reopened.get(Scope.everything(), [records[1].id]) == sorted(
                [records[1], twins[1]], key=lambda r: r.scope.as_tuple()
            )
            assert reopened.count(first) == 2 and reopened.count(second) == 1
        finally:
            reopened.close()

    def test_dimension_survives_reopen_even_when_empty(self, store: Store, open_store: StoreFactory) -> None:
        require_durable(store)
        scope = new_scope()
        record = make_record(scope)
        store.add([record], random_vectors(1))
        store.delete(scope, [record.id])
        reopened = reopen(store, open_store)
        try:
            with pytest.raises(DimensionMismatchError):
                reopened.add([make_record(scope)], random_vectors(1, dim=DIM * 2))
        finally:
            reopened.close()


class ConcurrencyTests(StoreFixtures):
    """Threads writing and reading one store: nothing lost, no untyped error."""

    def test_threads_write_and_read_concurrently(self, store: Store) -> None:
        writers, per_writer = 8, 50
        scopes = [new_scope(user_id=f"u{i}") for i in range(writers)]
        errors: list[BaseException] = []

        def write(index: int) -> None:
            try:
                for n in range(per_writer):
                    store.add([make_record(scopes[index], f"w{index}-{n}")], random_vectors(1, seed=n))
            except BaseException as exc:  # collected and re-raised by the test thread
                errors.append(exc)

        def read() -> None:
            try:
                for n in range(per_writer):
                    for scope in scopes:
                        store.count(scope)
                    store.search(scopes[n % writers], vector=random_vectors(1, seed=n)[0], limit=3)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        threads += [threading.Thread(target=read) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for index, scope in enumerate(scopes):
            contents = {r.message.content for r in store.list(scope)}
            assert contents == {f"w{index}-{n}" for n in range(per_writer)}

    def test_concurrent_deletes_and_searches(self, store: Store) -> None:
        scope = new_scope()
        records = [make_record(scope, f"r{i}") for i in range(400)]
        store.add(records, random_vectors(400))
        errors: list[BaseException] = []

        def delete(offset: int) -> None:
            try:
                for start in range(offset, 400, 40):
                    store.delete(scope, [r.id for r in records[start : start + 20]])
            except BaseException as exc:
                errors.append(exc)

        def search() -> None:
            try:
                for seed in range(30):
                    for hit in store.search(scope, vector=random_vectors(1, seed=seed)[0], limit=5):
                        assert hit.record.scope == scope
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=delete, args=(0,)), threading.Thread(target=delete, args=(20,))]
        threads += [threading.Thread(target=search) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert store.count(scope) == 0

    def test_first_vector_racing_a_search_gives_no_untyped_error(self, store: Store) -> None:
        errors: list[BaseException] = []
        scope = new_scope()

        def search() -> None:
            for _ in range(200):
                try:
                    store.search(scope, vector=[1.0] * 3)
                except MemcoreError:
                    pass
                except BaseException as exc:
                    errors.append(exc)

        thread = threading.Thread(target=search)
        thread.start()
        store.add([make_record(scope)], random_vectors(1))
        thread.join()
        assert errors == []


class VectorSpaceTests(StoreFixtures):
    """``bind_vector_space``: one embedder per store, remembered across reopen by durable stores."""

    def test_binding_is_checked(self, store: Store) -> None:
        assert store.vector_space() is None
        store.bind_vector_space(VectorSpace("hash", DIM))
        store.bind_vector_space(VectorSpace("hash", DIM))
        assert store.vector_space() == VectorSpace("hash", DIM)
        with pytest.raises(EmbedderMismatchError):
            store.bind_vector_space(VectorSpace("other-model", DIM))
        with pytest.raises(EmbedderMismatchError):
            store.bind_vector_space(VectorSpace("hash", DIM * 2))

    def test_binding_fixes_the_dimension_before_any_vector(self, store: Store) -> None:
        store.bind_vector_space(VectorSpace("hash", DIM))
        with pytest.raises(DimensionMismatchError):
            store.add([make_record(new_scope())], random_vectors(1, dim=DIM + 1))
        assert store.count(Scope.everything()) == 0

    def test_binding_must_match_existing_vectors(self, store: Store) -> None:
        store.add([make_record(new_scope())], random_vectors(1))
        with pytest.raises(EmbedderMismatchError):
            store.bind_vector_space(VectorSpace("hash", DIM + 1))
        store.bind_vector_space(VectorSpace("hash", DIM))

    def test_binding_survives_reopen(self, store: Store, open_store: StoreFactory) -> None:
        require_durable(store)
        store.bind_vector_space(VectorSpace("hash", DIM))
        reopened = reopen(store, open_store)
        try:
            assert reopened.vector_space() == VectorSpace("hash", DIM)
            with pytest.raises(EmbedderMismatchError):
                reopened.bind_vector_space(VectorSpace("other-model", DIM))
            with pytest.raises(DimensionMismatchError):
                reopened.add([make_record(new_scope())], random_vectors(1, dim=DIM + 1))
        finally:
            reopened.close()
