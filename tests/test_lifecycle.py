"""A memory's lifecycle: the policy's ttl, notes that consolidate or supersede, update, refresh."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from memcore.agent.memories import ChatHistoryMemory, LongtermMemory
from memcore.agent.policy import MemoryPolicy
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import InvalidInputError, RecordNotFoundError, UnsupportedOperationError
from memcore.records import NOTE_KIND, MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore
from memcore.testing import ManualClock


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    opened: Store = InMemoryStore() if request.param == "memory" else JsonlStore(tmp_path / "store")
    request.addfinalizer(opened.close)
    return opened


@pytest.fixture
def clock(store: Store) -> ManualClock:
    manual = ManualClock()
    store.clock = manual
    return manual


SCOPE = Scope(tenant="t", user_id="u", agent_id="a", session_id="s1")


def memory(store: Store, **policy: object) -> LongtermMemory:
    return LongtermMemory(store, HashEmbedder(64), SCOPE, policy=MemoryPolicy.model_validate(policy))


def test_the_policy_ttl_expires_turns_out_of_history_and_recall(store: Store, clock: ManualClock) -> None:
    mem = memory(store, ttl=timedelta(hours=1))
    mem.write([Message(role="user", content="my locker code is 4312")])
    assert "4312" in str(mem.get_context(query="locker code")[0])
    clock.advance(3601)
    assert "4312" not in str(mem.get_context(query="locker code")[0])
    assert store.sweep() == 1


def test_a_policy_ttl_on_a_store_without_expiry_is_refused_not_dropped(clock: ManualClock) -> None:
    class NoExpiry(InMemoryStore):
        capabilities = InMemoryStore.capabilities.__class__(durable=False)

    mem = LongtermMemory(NoExpiry(), HashEmbedder(64), SCOPE, policy=MemoryPolicy(ttl=timedelta(minutes=1)))
    with pytest.raises(UnsupportedOperationError):
        mem.write([Message(role="user", content="hello")])


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-1)])
def test_a_policy_ttl_must_be_positive(ttl: timedelta) -> None:
    with pytest.raises(InvalidInputError):
        MemoryPolicy(ttl=ttl)


def test_a_repeated_note_refreshes_the_one_there(store: Store, clock: ManualClock) -> None:
    mem = memory(store, ttl=timedelta(days=1))
    first = mem.remember("The user prefers green tea", metadata={"topic": "drinks"})
    assert first.kind == NOTE_KIND and first.expires_at == clock.now + timedelta(days=1)
    clock.advance(3600)
    again = mem.remember("the user prefers green tea.")
    assert again.id == first.id
    assert again.message.content == "the user prefers green tea."
    assert again.updated_at == clock.now and again.expires_at == clock.now + timedelta(days=1)
    assert again.metadata == {"topic": "drinks"}
    assert store.count(mem.recall_scope, filter={"kind": NOTE_KIND}) == 1
    other_speaker = mem.remember("The user prefers green tea", role="user")
    named = mem.remember("The user prefers green tea", name="planner")
    different = mem.remember("The user is allergic to peanuts")
    assert len({first.id, other_speaker.id, named.id, different.id}) == 4
    assert store.count(mem.recall_scope, filter={"kind": NOTE_KIND}) == 4


def test_a_note_from_another_session_of_the_agent_is_consolidated_too(store: Store) -> None:
    first = memory(store).remember("Meeting moved to Friday")
    other = LongtermMemory(store, HashEmbedder(64), SCOPE.model_copy(update={"session_id": "s2"}))
    assert other.remember("Meeting moved to Friday").id == first.id
    stranger = LongtermMemory(store, HashEmbedder(64), SCOPE.model_copy(update={"user_id": "v"}))
    assert stranger.remember("Meeting moved to Friday").id != first.id


def test_a_threshold_above_one_never_consolidates(store: Store) -> None:
    mem = memory(store, consolidation_threshold=1.0)
    mem.remember("exactly the same")
    mem2 = memory(store)
    assert mem2.remember("exactly the same").id != mem.remember("something else entirely").id


def test_supersedes_retires_the_older_note_for_good(store: Store) -> None:
    mem = memory(store)
    old = mem.remember("The office is on floor 3")
    new = mem.remember("The office moved to floor 7", supersedes=[old.id])
    assert new.metadata["supersedes"] == [str(old.id)]
    assert store.get(mem.recall_scope, [old.id]) == []
    messages, _ = mem.get_context(query="which floor is the office on")
    assert "floor 7" in str(messages) and "floor 3" not in str(messages)


def test_notes_are_recalled_within_the_budget(store: Store) -> None:
    mem = memory(store)
    mem.remember("The user's dog is called Biscuit")
    for i in range(30):
        mem.write([Message(role="user", content=f"filler turn number {i} about the weather")])
    messages, tokens = mem.get_context(60, query="what is the dog called")
    assert any("Biscuit" in m["content"] for m in messages)
    assert tokens <= 60


def test_memory_update_re_embeds_new_content(store: Store) -> None:
    mem = memory(store)
    [record] = mem.write([Message(role="user", content="I live in Lisbon")])
    mem.update(record.id, content="I live in Oslo", metadata={"moved": True})
    [hit] = store.search(mem.recall_scope, vector=HashEmbedder(64).embed(["I live in Oslo"])[0], limit=1)
    assert hit.record.id == record.id and hit.score == pytest.approx(1.0, abs=1e-5)
    assert hit.record.metadata == {"moved": True} and hit.record.updated_at is not None
    with pytest.raises(RecordNotFoundError):
        mem.update(uuid4(), content="nothing to change")


def test_chat_history_memory_remembers_and_updates_without_vectors(store: Store) -> None:
    mem = ChatHistoryMemory(store, SCOPE)
    note = mem.remember("call mum on Sunday")
    assert mem.remember("call mum on Sunday").id != note.id  # nothing to compare by: no consolidation
    assert mem.update(note.id, content="call mum on Saturday").message.content == "call mum on Saturday"


def test_refresh_on_read_keeps_a_recalled_record_alive(store: Store, clock: ManualClock) -> None:
    mem = memory(store, ttl=timedelta(minutes=10), refresh_on_read=True, reach="user")
    other = LongtermMemory(store, HashEmbedder(64), SCOPE.model_copy(update={"session_id": "s2"}))
    [kept] = other.write([Message(role="user", content="my bike is a red fixie")])
    other.write([Message(role="user", content="unrelated chatter")])  # written without a ttl
    store.update(kept.scope, kept.id, ttl=600)
    for _ in range(3):
        clock.advance(500)
        assert "red fixie" in str(mem.get_context(query="what bike do I ride")[0])
    clock.advance(601)
    assert store.get(kept.scope, [kept.id]) == []


def test_the_async_twins(store: Store) -> None:
    mem = memory(store)

    async def run() -> None:
        first = await mem.aremember("likes jazz")
        assert (await mem.aremember("likes jazz")).id == first.id
        updated = await mem.aupdate(first.id, content="likes bebop")
        assert updated.message.content == "likes bebop"
        assert [e.count for e in await store.ascopes(SCOPE)] == [1]

    asyncio.run(run())


# -- regressions found by an adversarial review -------------------------------------------------


def test_an_update_that_raced_another_reads_again_instead_of_writing_back_old_fields(store: Store) -> None:
    scope = Scope(tenant="t", user_id="u")
    record = MemoryRecord(scope=scope, message=Message(role="user", content="lives in Paris"))
    store.add([record], [[1.0, 0.0, 0.0]])
    read_vector, raced = store._vectors, []

    def vectors_after_another_update(*args: Any) -> Any:  # between this update's read and its write
        if not raced:
            raced.append(True)
            store.update(scope, record.id, content="lives in Berlin", vector=[0.0, 1.0, 0.0])
        return read_vector(*args)

    store._vectors = vectors_after_another_update  # type: ignore[method-assign]
    store.update(scope, record.id, metadata={"verified": True})
    [stored] = store.get(scope, [record.id])
    assert (stored.message.content, stored.metadata) == ("lives in Berlin", {"verified": True})
    assert store.vectors(scope, [record.id])[record.id].tolist() == [0.0, 1.0, 0.0]


def test_consolidation_never_writes_into_another_owners_note(store: Store) -> None:
    policy = MemoryPolicy(reach="tenant")
    bob = LongtermMemory(store, HashEmbedder(64), Scope(tenant="acme", user_id="bob"), policy=policy)
    alice = LongtermMemory(store, HashEmbedder(64), Scope(tenant="acme", user_id="alice"), policy=policy)
    bobs = bob.remember("Prefers meetings after 10am", metadata={"owner": "bob"})
    alices = alice.remember("Prefers meetings after 10am", metadata={"owner": "alice"}, ttl=60)
    assert alices.id != bobs.id and alices.scope.user_id == "alice"
    assert store.get(bobs.scope, [bobs.id]) == [bobs]


def test_refresh_on_read_never_shortens_an_expiry_nor_stamps_updated_at(
    store: Store, clock: ManualClock
) -> None:
    mem = memory(store, ttl=timedelta(hours=1), refresh_on_read=True)
    note = mem.remember("the passport number ends in 42", ttl=timedelta(days=365))
    mem.retrieve("passport number")
    [stored] = store.get(SCOPE, [note.id])
    assert stored.expires_at == clock.now + timedelta(days=365) and stored.updated_at is None


def test_a_malformed_superseded_id_is_refused_before_anything_is_written(store: Store) -> None:
    mem = memory(store)
    with pytest.raises(InvalidInputError):
        mem.remember("a fact about llamas", supersedes=["not-a-uuid"])
    assert store.count(SCOPE) == 0


def test_a_ttl_too_long_is_a_typed_error_in_memories(store: Store) -> None:
    with pytest.raises(InvalidInputError):
        memory(store).remember("forever and a day", ttl=timedelta(days=999_999_999))
    with pytest.raises(InvalidInputError):
        memory(store, ttl=timedelta(days=999_999_999)).write([Message(role="user", content="hi")])
    assert store.count(SCOPE) == 0


def test_a_clock_past_the_latest_expiry_never_expires_what_never_expires(store: Store) -> None:
    lasting = MemoryRecord(scope=SCOPE, message=Message(role="user", content="lasting"))
    store.add([lasting])
    store.add([MemoryRecord(scope=SCOPE, message=Message(role="user", content="fleeting"))], ttl=60)
    store.clock = lambda: datetime(2300, 1, 1, tzinfo=UTC)
    assert store.list(SCOPE) == [lasting]
    assert store.sweep() == 1 and store.list(SCOPE) == [lasting]


@pytest.mark.parametrize("reading", [lambda: "noon", lambda: datetime(2030, 1, 1)])
def test_a_clock_that_does_not_tell_an_aware_time_is_a_typed_error(store: Store, reading: Any) -> None:
    store.clock = reading
    with pytest.raises(InvalidInputError):
        store.count(SCOPE)


def test_scopes_through_an_exact_prefix_answer_exact_scopes_at_any_depth(store: Store) -> None:
    user = Scope(tenant="t", user_id="u")
    for scope in (
        user,
        user.model_copy(update={"agent_id": "a"}),
        user.model_copy(update={"session_id": "s"}),
    ):
        store.add([MemoryRecord(scope=scope, message=Message(role="user", content="x"))])
    for depth in (1, 2, 4):
        [entry] = store.scopes(user.exact(), depth=depth)
        assert entry.scope.is_exact and entry.count == 1 == store.count(entry.scope)


def test_a_migration_during_which_records_expire_checks_out(store: Store) -> None:
    from memcore.transfer import migrate

    clock = ManualClock()
    destination = InMemoryStore()
    store.clock = destination.clock = clock
    store.add([MemoryRecord(scope=SCOPE, message=Message(role="user", content="keeps"))])
    store.add([MemoryRecord(scope=SCOPE, message=Message(role="user", content="short"))], ttl=60)
    write = destination._add

    def slow_add(*args: Any) -> None:  # the copy takes five minutes
        write(*args)
        clock.advance(300)

    destination._add = slow_add  # type: ignore[method-assign]
    assert migrate(store, destination, SCOPE).records == 2
    assert [r.message.content for r in destination.list(SCOPE)] == ["keeps"]
