"""Conformance mixin for the record lifecycle: expiry, ``update``, ``sweep`` and ``scopes``.

Time is the store's :attr:`~memcore.store.BaseStore.clock`, which these tests replace with a
:class:`ManualClock`, so records expire between two calls exactly when a test says. The
differential test runs random sequences of writes, expiries, updates, deletes and sweeps
against the reference semantics (a dict of live records) and compares every read path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore.errors import AmbiguousIdError, InvalidInputError, RecordNotFoundError, UnsupportedOperationError
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.helpers import StoreFixtures, make_record, new_scope, random_vectors, reopen

EXAMPLES = 25
_STEP_KINDS = ("add", "add_ttl", "advance", "update", "update_ttl", "delete", "sweep")


class ManualClock:
    """A clock that moves only when told: ``store.clock = ManualClock()``."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        self.now += timedelta(seconds=seconds)


def require_expiry(store: Store) -> None:
    """Skip, naming the missing capability, unless the store can expire records."""
    if not store.capabilities.expiry:
        pytest.skip(f"{store.name} lacks the capability 'expiry'")


class LifecycleTests(StoreFixtures):
    """Expiry on every read path, ``update``, ``sweep``/``purge`` and ``scopes``."""

    @pytest.fixture
    def clock(self, store: Store) -> ManualClock:
        """The store's clock, under the test's control."""
        manual = ManualClock()
        store.clock = manual
        return manual

    # -- expiry ---------------------------------------------------------------------------------

    def test_a_ttl_is_honoured_or_refused_loudly_never_dropped(self, store: Store) -> None:
        scope = new_scope()
        if store.capabilities.expiry:
            store.add([make_record(scope)], ttl=60)
            assert store.list(scope)[0].expires_at is not None
            return
        with pytest.raises(UnsupportedOperationError):
            store.add([make_record(scope)], ttl=60)
        with pytest.raises(UnsupportedOperationError):
            store.add([make_record(scope).model_copy(update={"expires_at": datetime.now(UTC)})])
        assert store.count(scope) == 0

    def test_an_expired_record_is_invisible_on_every_read_path(
        self, store: Store, clock: ManualClock
    ) -> None:
        require_expiry(store)
        scope = new_scope(user_id="u", agent_id="a", session_id="s")
        lasting = make_record(scope, "lasting apple pie", metadata={"n": 1})
        fleeting = make_record(scope, "fleeting apple pie", metadata={"n": 1})
        vectors = random_vectors(2, seed=3)
        store.add([lasting], vectors[:1])
        store.add([fleeting], vectors[1:], ttl=60)
        [stored] = store.get(scope, [fleeting.id])
        assert stored.expires_at == clock.now + timedelta(seconds=60)
        assert store.count(scope) == 2
        clock.advance(60)  # live until, not at, its expiry
        wide = Scope(tenant=scope.tenant)
        for reader in (scope, scope.exact(), wide):
            assert store.get(reader, [fleeting.id, lasting.id]) == [lasting]
            assert list(store.vectors(reader, [fleeting.id])) == []
            assert [r.id for r in store.list(reader)] == [lasting.id]
            assert [r.id for r in store.list(reader, filter={"metadata.n": 1}, order="desc", limit=5)] == [
                lasting.id
            ]
            assert store.count(reader) == store.count(reader, filter={"metadata.n": 1}) == 1
            assert [h.record.id for h in store.search(reader, vector=vectors[1], limit=5)] == [lasting.id]
            assert [h.record.id for h in store.search(reader, keywords="fleeting apple", limit=5)] == [
                lasting.id
            ]
            if store.capabilities.text_search:
                assert store.search(reader, text="fleeting") == []
            assert [entry.count for entry in store.scopes(reader)] == [1]

    def test_ttl_sets_every_record_of_the_batch_and_expires_at_can_be_given(
        self, store: Store, clock: ManualClock
    ) -> None:
        require_expiry(store)
        scope = new_scope()
        given_expiry = clock.now + timedelta(hours=2)
        batch = [
            make_record(scope, "a"),
            make_record(scope, "b").model_copy(update={"expires_at": given_expiry}),
        ]
        store.add(batch, ttl=timedelta(minutes=5))
        assert {r.expires_at for r in store.list(scope)} == {clock.now + timedelta(minutes=5)}
        own = make_record(scope, "c").model_copy(update={"expires_at": given_expiry})
        store.add([own])
        clock.advance(3600)
        assert [r.id for r in store.list(scope)] == [own.id]
        assert store.list(scope)[0].expires_at == given_expiry

    def test_a_bad_ttl_is_refused_typed_and_writes_nothing(self, store: Store, clock: ManualClock) -> None:
        require_expiry(store)
        scope = new_scope()
        for ttl in (0, -1, float("nan"), float("inf"), "60", True, timedelta(days=10**6)):
            with pytest.raises(InvalidInputError):
                store.add([make_record(scope)], ttl=ttl)  # type: ignore[arg-type]
        assert store.count(scope) == 0

    def test_expiry_is_a_filterable_field(self, store: Store, clock: ManualClock) -> None:
        require_expiry(store)
        scope = new_scope()
        soon, later, never = (
            make_record(scope, "soon"),
            make_record(scope, "later"),
            make_record(scope, "never"),
        )
        store.add([soon], ttl=60)
        store.add([later], ttl=3600)
        store.add([never])
        cutoff = clock.now + timedelta(minutes=30)
        assert [r.id for r in store.list(scope, filter={"expires_at": {"$lt": cutoff}})] == [soon.id]
        assert {r.id for r in store.list(scope, filter={"expires_at": {"$gt": cutoff}})} == {
            later.id,
            never.id,
        }

    def test_sweep_deletes_expired_records_for_good(self, store: Store, clock: ManualClock) -> None:
        require_expiry(store)
        scope, other = new_scope(user_id="u"), new_scope(user_id="v")
        store.add([make_record(scope, "old"), make_record(other, "old too")], ttl=10)
        keep = make_record(scope, "keep")
        store.add([keep], ttl=1000)
        clock.advance(11)
        assert store.sweep() == 2
        assert store.sweep() == 0
        clock.now -= timedelta(seconds=20)  # a swept record is gone, not hidden
        assert [r.id for r in store.list(scope)] == [keep.id]
        assert store.count(other) == 0

    def test_purge_sweeps_and_expired_records_stay_gone_after_reopen(
        self, store: Store, clock: ManualClock, store_factory: Any
    ) -> None:
        require_expiry(store)
        scope = new_scope()
        doomed, kept = make_record(scope, "doomed"), make_record(scope, "kept")
        store.add([doomed], ttl=5)
        store.add([kept])
        clock.advance(6)
        store.purge()
        if store.capabilities.durable:
            store = reopen(store, store_factory)
            try:
                store.clock = ManualClock(clock.now - timedelta(seconds=60))
                assert [r.id for r in store.list(scope)] == [kept.id]
            finally:
                store.close()
        else:
            clock.now -= timedelta(seconds=60)
            assert [r.id for r in store.list(scope)] == [kept.id]

    def test_delete_reaches_expired_records_too(self, store: Store, clock: ManualClock) -> None:
        require_expiry(store)
        scope = new_scope()
        records = [make_record(scope, "a"), make_record(scope, "b")]
        store.add(records, ttl=5)
        clock.advance(10)
        assert store.delete(scope, [records[0].id]) == 1
        assert store.delete_where(scope, {}) == 1
        clock.now -= timedelta(seconds=60)
        assert store.count(scope) == 0

    # -- update ---------------------------------------------------------------------------------

    def test_update_changes_only_what_is_given(self, store: Store, clock: ManualClock) -> None:
        scope = new_scope(user_id="u")
        record = make_record(scope, "first words", metadata={"a": 1, "b": "x"})
        vector = random_vectors(1, seed=4)
        store.add([record], vector)
        clock.advance(5)
        updated = store.update(
            scope, record.id, content="second words", metadata={"a": 2, "b": None, "c": True}
        )
        assert updated.message.content == "second words"
        assert updated.metadata == {"a": 2, "c": True}
        assert updated.updated_at == clock.now
        assert (updated.created_at, updated.scope, updated.kind) == (
            record.created_at,
            record.scope,
            record.kind,
        )
        assert store.get(scope, [record.id]) == [updated]
        [hit] = store.search(scope, vector=vector[0], limit=1)  # the vector is kept
        assert hit.record == updated and hit.score == pytest.approx(1.0, abs=1e-5)
        assert [r.id for r in store.list(scope, filter={"metadata.a": 2})] == [record.id]
        new_vector = random_vectors(1, seed=5)
        store.update(scope, record.id, vector=new_vector[0])
        [hit] = store.search(scope, vector=new_vector[0], limit=1)
        assert hit.record.message.content == "second words" and hit.score == pytest.approx(1.0, abs=1e-5)
        assert store.count(scope) == 1

    def test_update_sets_keeps_and_clears_the_expiry(self, store: Store, clock: ManualClock) -> None:
        require_expiry(store)
        scope = new_scope()
        record = make_record(scope)
        store.add([record], ttl=60)
        assert store.update(scope, record.id, content="x").expires_at == clock.now + timedelta(seconds=60)
        clock.advance(30)
        assert store.update(scope, record.id, ttl=60).expires_at == clock.now + timedelta(seconds=60)
        clock.advance(59)
        assert store.get(scope, [record.id])  # refreshed: still live
        assert store.update(scope, record.id, ttl=None).expires_at is None
        clock.advance(10**6)
        assert store.count(scope) == 1

    def test_update_of_a_missing_deleted_expired_or_foreign_record_raises_not_found(
        self, store: Store, clock: ManualClock
    ) -> None:
        scope, stranger = new_scope(user_id="u"), new_scope(user_id="u")
        record = make_record(scope)
        store.add([record])
        for reader, record_id in ((scope, make_record(scope).id), (stranger, record.id)):
            with pytest.raises(RecordNotFoundError):
                store.update(reader, record_id, content="x")
        assert store.get(scope, [record.id]) == [record]
        if store.capabilities.expiry:
            short = make_record(scope)
            store.add([short], ttl=1)
            clock.advance(2)
            with pytest.raises(RecordNotFoundError):
                store.update(scope, short.id, ttl=60)
            clock.now -= timedelta(seconds=10)
            assert store.get(scope, [short.id])[0].expires_at is not None  # not revived, not changed
        store.delete(scope, [record.id])
        with pytest.raises(RecordNotFoundError):
            store.update(scope, record.id, content="x")
        assert store.get(scope, [record.id]) == []

    def test_update_through_a_wide_scope_of_an_id_in_two_scopes_is_ambiguous(self, store: Store) -> None:
        scope = new_scope(user_id="u")
        first = make_record(scope.model_copy(update={"agent_id": "a"}))
        second = first.model_copy(update={"scope": scope.model_copy(update={"agent_id": "b"})})
        store.add([first, second])
        with pytest.raises(AmbiguousIdError):
            store.update(scope, first.id, content="x")
        assert store.update(second.scope.exact(), first.id, content="x").scope == second.scope
        assert store.get(first.scope.exact(), [first.id]) == [first]

    def test_bad_update_input_is_refused_typed_and_changes_nothing(self, store: Store) -> None:
        scope = new_scope()
        record = make_record(scope)
        store.add([record], random_vectors(1))
        bad: list[dict[str, Any]] = [
            {"content": 3},
            {"metadata": {"bad key!": 1}},
            {"metadata": {"n": float("nan")}},
            {"metadata": ["not", "a", "mapping"]},
            {"vector": [float("nan")] * 8},
            {"vector": [1.0, 2.0]},
            {"content": "x" * 2_000_000},
        ]
        for changes in bad:
            with pytest.raises(InvalidInputError):
                store.update(scope, record.id, **changes)
        with pytest.raises(InvalidInputError):
            store.update(scope, "not-a-uuid", content="x")
        assert store.get(scope, [record.id]) == [record]

    def test_an_update_racing_a_delete_never_brings_the_record_back(self, store: Store) -> None:
        scope = new_scope()
        for round_ in range(15):
            record = make_record(scope, f"racer {round_}")
            store.add([record])
            start = threading.Barrier(2)
            errors: list[BaseException] = []

            def update_until_gone(
                record: MemoryRecord = record,
                start: threading.Barrier = start,
                errors: list[BaseException] = errors,
            ) -> None:
                start.wait()
                for _ in range(30):
                    try:
                        store.update(scope, record.id, content="again")
                    except RecordNotFoundError:
                        return
                    except BaseException as exc:
                        errors.append(exc)
                        return

            updater = threading.Thread(target=update_until_gone)
            updater.start()
            start.wait()
            store.delete(scope, [record.id])
            updater.join()
            assert not errors, errors
            assert store.get(scope, [record.id]) == [], f"round {round_}: an update revived a deleted record"

    def test_concurrent_updates_of_one_record_all_land(self, store: Store) -> None:
        """Two writers setting different metadata keys of one record: neither writes back the
        other's old metadata (``update`` reads the record again when it changed under it)."""
        scope = new_scope()
        record = make_record(scope)
        store.add([record], random_vectors(1))

        def set_keys(prefix: str) -> None:
            for i in range(15):
                store.update(scope, record.id, metadata={f"{prefix}{i}": i})

        writers = [threading.Thread(target=set_keys, args=(prefix,)) for prefix in "ab"]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        [stored] = store.get(scope, [record.id])
        assert {f"{prefix}{i}" for prefix in "ab" for i in range(15)} <= set(stored.metadata)

    def test_reads_racing_updates_see_the_old_record_or_the_new_one(self, store: Store) -> None:
        scope = new_scope()
        record = make_record(scope, "version 0")
        store.add([record], random_vectors(1))
        done = threading.Event()
        seen: list[object] = []

        def read() -> None:
            while not done.is_set():
                found = store.get(scope, [record.id])
                listed = store.list(scope)
                if len(found) != 1 or len(listed) != 1:
                    seen.append((found, listed))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for version in range(1, 40):
                store.update(scope, record.id, content=f"version {version}")
        finally:
            done.set()
            reader.join()
        assert seen == []
        assert store.get(scope, [record.id])[0].message.content == "version 39"

    # -- scopes ---------------------------------------------------------------------------------

    def test_scopes_lists_what_is_under_a_prefix_with_counts(self, store: Store, clock: ManualClock) -> None:
        base = new_scope()
        tenant = base.tenant
        assert tenant is not None
        layout = {
            ("u1", "a", "s1"): 3,
            ("u1", "a", "s2"): 1,
            ("u1", "b", None): 2,
            ("u2", "a", "s1"): 1,
            ("u2", None, None): 1,
        }
        for (user, agent, session), n in layout.items():
            scope = Scope(tenant=tenant, user_id=user, agent_id=agent, session_id=session)
            store.add([make_record(scope, f"r{i}") for i in range(n)])
        stranger = new_scope(user_id="u1")
        store.add([make_record(stranger)])
        prefix = Scope(tenant=tenant)
        exact = store.scopes(prefix)
        assert [(e.scope.as_tuple()[1:], e.count) for e in exact] == [
            (key, n)
            for key, n in sorted(
                layout.items(), key=lambda kv: tuple((v is not None, v or "") for v in kv[0])
            )
        ]
        assert all(e.scope.is_exact and e.scope.tenant == tenant for e in exact)
        assert all(store.count(e.scope) == e.count for e in exact)
        by_user = store.scopes(prefix, depth=2)
        assert [(e.scope.user_id, e.count) for e in by_user] == [("u1", 6), ("u2", 2)]
        assert [(e.scope.as_tuple(), e.count) for e in store.scopes(prefix, depth=1)] == [
            ((tenant, None, None, None), 8)
        ]
        u1 = Scope(tenant=tenant, user_id="u1")
        assert [(e.scope.agent_id, e.count) for e in store.scopes(u1, depth=3)] == [("a", 4), ("b", 2)]
        agent_a = Scope(tenant=tenant, agent_id="a")  # a prefix that skips a level keeps its field
        assert [(e.scope.user_id, e.scope.agent_id, e.count) for e in store.scopes(agent_a, depth=2)] == [
            ("u1", "a", 4),
            ("u2", "a", 1),
        ]
        assert len(store.scopes(prefix, limit=2)) == 2
        assert store.scopes(Scope(tenant=tenant, user_id="nobody")) == []
        for depth in (0, 5, True, "2"):
            with pytest.raises(InvalidInputError):
                store.scopes(prefix, depth=depth)  # type: ignore[arg-type]
        if store.capabilities.expiry:
            short = Scope(tenant=tenant, user_id="u3")
            store.add([make_record(short)], ttl=5)
            assert store.scopes(short) != []
            clock.advance(6)
            assert store.scopes(short) == []


class DifferentialLifecycleTests(StoreFixtures):
    """Hypothesis: random lifecycles against the reference semantics, on a manual clock."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        steps=st.lists(st.tuples(st.sampled_from(_STEP_KINDS), st.integers(0, 7)), min_size=1, max_size=25)
    )
    def test_random_lifecycles_agree_with_the_reference(
        self, store: Store, steps: list[tuple[str, int]]
    ) -> None:
        clock = ManualClock()
        store.clock = clock
        model = _Reference(new_scope(user_id="u"), clock, expiry=store.capabilities.expiry)
        for kind, n in steps:
            model.step(store, kind, n)
            model.check(store)


@dataclass
class _Reference:
    """What a store must hold: the live records by (session, id), and the expiry of each."""

    scope: Scope
    clock: ManualClock
    expiry: bool
    records: dict[tuple[str, UUID], MemoryRecord] = field(default_factory=dict)
    written: list[MemoryRecord] = field(default_factory=list)

    def _session(self, n: int) -> Scope:
        return self.scope.model_copy(update={"session_id": f"s{n % 2}"})

    def _live(self) -> Iterator[MemoryRecord]:
        return (r for r in self.records.values() if r.is_live(self.clock.now))

    def step(self, store: Store, kind: str, n: int) -> None:
        if kind in ("add", "add_ttl"):
            lifetime = 10 * (n + 1) if kind == "add_ttl" and self.expiry else None
            record = make_record(self._session(n), f"note {len(self.written)} word{n}")
            store.add([record], random_vectors(1, seed=len(self.written)), ttl=lifetime)
            if lifetime is not None:
                record = record.model_copy(
                    update={"expires_at": self.clock.now + timedelta(seconds=lifetime)}
                )
            self.records[(record.scope.session_id or "", record.id)] = record
            self.written.append(record)
        elif kind == "advance":
            self.clock.advance(7 * n + 1)
        elif kind in ("update", "update_ttl") and self.written:
            target = self.written[n % len(self.written)]
            key = (target.scope.session_id or "", target.id)
            current = self.records.get(key)
            refresh = kind == "update_ttl" and self.expiry
            try:
                if refresh:
                    store.update(target.scope, target.id, ttl=15)
                else:
                    store.update(target.scope, target.id, content=f"updated {n}", metadata={"v": n})
            except RecordNotFoundError:
                assert current is None or not current.is_live(self.clock.now)
                return
            assert current is not None and current.is_live(self.clock.now)
            if refresh:
                changes: dict[str, Any] = {"expires_at": self.clock.now + timedelta(seconds=15)}
            else:
                message = current.message.model_copy(update={"content": f"updated {n}"})
                changes = {"message": message, "metadata": {**current.metadata, "v": n}}
            self.records[key] = current.model_copy(update={**changes, "updated_at": self.clock.now})
        elif kind == "delete" and self.written:
            target = self.written[n % len(self.written)]
            removed = self.records.pop((target.scope.session_id or "", target.id), None)
            assert store.delete(target.scope, [target.id]) == int(removed is not None)
        elif kind == "sweep":
            expired = [key for key, r in self.records.items() if not r.is_live(self.clock.now)]
            for key in expired:
                del self.records[key]
            # The store outlives one example: records of earlier examples may be swept too.
            assert store.sweep() >= len(expired)

    def check(self, store: Store) -> None:
        live = sorted(self._live(), key=lambda r: (r.created_at, r.id.int >> 64))
        assert store.list(self.scope) == live
        assert store.count(self.scope) == len(live)
        asked = [r.id for r in self.written]
        assert {r.id: r for r in store.get(self.scope, asked)} == {r.id: r for r in live}
        assert set(store.vectors(self.scope.model_copy(update={"session_id": "s0"}), asked)) == {
            r.id for r in live if r.scope.session_id == "s0"
        }
        hits = store.search(self.scope, vector=np.ones(8, dtype=np.float32), limit=50)
        assert sorted(h.record.id.int for h in hits) == sorted(r.id.int for r in live)
        expected_scopes: dict[str | None, int] = {}
        for record in live:
            expected_scopes[record.scope.session_id] = expected_scopes.get(record.scope.session_id, 0) + 1
        assert {e.scope.session_id: e.count for e in store.scopes(self.scope)} == expected_scopes
