"""Memories beyond the conformance suite: history pinning, policy, write barriers, bad input."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from memcore.agent.memories import NO_MEMORIES_NOTE, ChatHistoryMemory, LongtermMemory, VectorMemory
from memcore.agent.policy import MemoryPolicy
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import (
    ContextBudgetError,
    EmbedderMismatchError,
    InvalidInputError,
    InvalidRecordError,
    ScopeError,
)
from memcore.records import FunctionCall, MemoryRecord, Message, ToolCall
from memcore.scope import Scope
from memcore.stores.in_memory import InMemoryStore

SCOPE = Scope(tenant="t", user_id="u", agent_id="a", session_id="s1")


class CountingEmbedder(HashEmbedder):
    """A hash embedder that counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        return super().embed(texts)


def test_history_window_pins_the_first_system_message() -> None:
    memory = ChatHistoryMemory(InMemoryStore(), SCOPE, window=3)
    memory.write([Message(role="system", content="rules"), Message(role="system", content="later system")])
    memory.write([Message(role="user", content=f"turn {i}") for i in range(6)])
    contents = [item.record.message.content for item in memory.retrieve()]
    assert contents == ["rules", "turn 3", "turn 4", "turn 5"]


def test_history_memory_stores_no_vectors_and_reads_only_its_session() -> None:
    store = InMemoryStore()
    memory = ChatHistoryMemory(store, SCOPE)
    memory.write([Message(role="user", content="hello")])
    other = ChatHistoryMemory(store, SCOPE.model_copy(update={"session_id": "s2"}))
    assert other.retrieve() == []
    assert store.dimension is None


def test_one_write_embeds_once_and_stores_once() -> None:
    store, embedder = InMemoryStore(), CountingEmbedder()
    memory = LongtermMemory(store, embedder, SCOPE)
    memory.write([Message(role="user", content="My cat is Mochi"), Message(role="assistant", content="Nice")])
    assert embedder.calls == [["My cat is Mochi", "Nice"]]
    assert store.count(SCOPE) == 2
    memory.retrieve()
    assert embedder.calls == [["My cat is Mochi", "Nice"]], (
        "the latest user message is embedded from the cache"
    )
    memory.retrieve("a new question")
    assert embedder.calls[-1] == ["a new question"]


def test_a_store_of_another_embedder_is_refused() -> None:
    store = InMemoryStore()
    VectorMemory(store, HashEmbedder(dim=32), SCOPE)
    with pytest.raises(EmbedderMismatchError):
        VectorMemory(store, HashEmbedder(dim=64), SCOPE)


def test_records_outside_the_memory_scope_are_refused() -> None:
    store = InMemoryStore()
    memory = LongtermMemory(store, HashEmbedder(dim=32), SCOPE)
    stranger = MemoryRecord(
        scope=Scope(tenant="t", user_id="someone-else"), message=Message(role="user", content="x")
    )
    with pytest.raises(ScopeError):
        memory.write_records([stranger])
    assert store.count(Scope.everything()) == 0


def test_a_memory_needs_a_concrete_scope() -> None:
    with pytest.raises(InvalidInputError):
        ChatHistoryMemory(InMemoryStore(), Scope.everything())


def test_policy_controls_saving_limits_and_reach() -> None:
    store = InMemoryStore()
    quiet = LongtermMemory(store, HashEmbedder(dim=32), SCOPE, policy=MemoryPolicy(auto_save=False))
    assert quiet.observe([Message(role="user", content="not saved")]) == []
    assert store.count(SCOPE) == 0

    policy = MemoryPolicy(limit=2, max_chars=10, reach="session", inject_when_empty=True)
    memory = LongtermMemory(store, HashEmbedder(dim=32), SCOPE, window=1, policy=policy)
    assert memory.recall_scope.as_tuple() == SCOPE.as_tuple() and memory.recall_scope.is_exact
    [note, *_] = [i for i in memory.retrieve("anything") if i.source == "recall"] or [None]
    assert note is not None and note.record.message.content == NO_MEMORIES_NOTE
    memory.observe([Message(role="user", content=f"a long fact about cats number {i}") for i in range(5)])
    recalled = [i for i in memory.retrieve("fact about cats") if i.source == "recall"]
    assert len(recalled) == 2
    messages, _ = memory.get_context(query="fact about cats")
    assert any(m["content"].endswith("…") and len(m["content"]) == 11 for m in messages)
    assert all(len(r.message.content) > 10 for r in store.list(SCOPE))


def test_default_policy_recalls_across_the_agents_sessions() -> None:
    assert MemoryPolicy().recall_scope(SCOPE) == Scope(tenant="t", user_id="u", agent_id="a")
    assert MemoryPolicy(reach="tenant").recall_scope(SCOPE) == Scope(tenant="t")
    own = MemoryPolicy(reach="user").recall_scope(Scope(session_id="x"))
    assert own.is_exact and own.as_tuple() == Scope(session_id="x").as_tuple()
    with pytest.raises(InvalidInputError):
        MemoryPolicy(limit=0)


def test_buffers_commit_in_declaration_order_and_failed_tasks_are_discarded() -> None:
    store = InMemoryStore()
    memory = LongtermMemory(store, HashEmbedder(dim=32), SCOPE)
    first, failing, last = memory.buffer(), memory.buffer(), memory.buffer()
    started = threading.Barrier(3)

    def task(buffer_index: int) -> None:
        buffer = (first, failing, last)[buffer_index]
        started.wait()
        try:
            with buffer:
                buffer.write([Message(role="assistant", content=f"task {buffer_index} result")])
                if buffer is failing:
                    raise RuntimeError("task failed")
        except RuntimeError:
            pass

    threads = [threading.Thread(target=task, args=(i,)) for i in (2, 1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.count(SCOPE) == 0, "readers never see uncommitted writes"
    committed = memory.barrier()
    assert [r.message.content for r in committed] == ["task 0 result", "task 2 result"]
    assert [r.message.content for r in store.list(SCOPE)] == ["task 0 result", "task 2 result"]
    assert memory.barrier() == []
    with pytest.raises(InvalidInputError):
        failing.write([Message(role="user", content="late")])


def test_get_context_keeps_tool_calls_with_their_results() -> None:
    memory = LongtermMemory(InMemoryStore(), HashEmbedder(dim=32), SCOPE, window=3)
    call = ToolCall(id="c1", function=FunctionCall(name="weather", arguments="{}"))
    memory.write(
        [
            Message(role="user", content="weather?"),
            Message(role="assistant", content="", tool_calls=(call,)),
            Message(role="tool", content="sunny", tool_call_id="c1"),
            Message(role="assistant", content="It is sunny."),
        ]
    )
    messages, _ = memory.get_context(query="weather")
    roles = [m["role"] for m in messages]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert messages[-3]["tool_calls"][0]["id"] == messages[-2]["tool_call_id"] == "c1"
    for limit in range(20, 90, 5):
        small, _ = memory.get_context(limit, query="weather")
        calls = [m for m in small if "tool_calls" in m]
        results = [m for m in small if m["role"] == "tool"]
        assert len(calls) == len(results) <= 1, limit


def test_token_limit_errors_are_typed() -> None:
    memory = ChatHistoryMemory(InMemoryStore(), SCOPE)
    memory.write([Message(role="system", content="a very long system prompt " * 50)])
    with pytest.raises(ContextBudgetError):
        memory.get_context(20)
    with pytest.raises(ContextBudgetError):
        memory.get_context(-5)


def test_a_barrier_refuses_open_buffers_and_can_be_retried_after_a_failure() -> None:
    store = InMemoryStore()
    memory = LongtermMemory(store, HashEmbedder(dim=32), SCOPE)
    running = memory.buffer()
    running.write([Message(role="assistant", content="step 1")])
    with pytest.raises(InvalidInputError):
        memory.barrier()
    running.write([Message(role="assistant", content="step 2")])
    running.finish()
    with pytest.raises(InvalidInputError):
        running.write([Message(role="assistant", content="too late")])

    class BrokenStoreError(Exception):
        pass

    def fail(*args: object) -> None:
        raise BrokenStoreError

    real_add = store.add
    store.add = fail  # type: ignore[method-assign,assignment]
    with pytest.raises(BrokenStoreError):
        memory.barrier()
    store.add = real_add  # type: ignore[method-assign]
    assert [r.message.content for r in memory.barrier()] == ["step 1", "step 2"]
    assert [r.message.content for r in store.list(SCOPE)] == ["step 1", "step 2"]


def test_forget_where_stays_in_the_memory_scope_unless_asked() -> None:
    store = InMemoryStore()
    earlier = LongtermMemory(store, HashEmbedder(dim=32), SCOPE.model_copy(update={"session_id": "s0"}))
    earlier.write([Message(role="user", content="from the earlier session")])
    memory = LongtermMemory(store, HashEmbedder(dim=32), SCOPE)
    memory.write([Message(role="user", content="from this session")])
    assert memory.forget_where({"role": "user"}) == 1
    assert [r.message.content for r in store.list(Scope(tenant="t"))] == ["from the earlier session"]
    assert memory.forget_where({"role": "user"}, in_recall_scope=True) == 1
    assert store.count(Scope(tenant="t")) == 0


def test_recall_reach_never_widens_past_what_the_scope_names() -> None:
    tenant_and_session = Scope(tenant="t", session_id="s")
    own = MemoryPolicy().recall_scope(tenant_and_session)
    assert own.is_exact and own.as_tuple() == tenant_and_session.as_tuple()
    store = InMemoryStore()
    bob = LongtermMemory(store, HashEmbedder(dim=32), Scope(tenant="t", user_id="bob", session_id="b"))
    bob.write([Message(role="user", content="bob's bank PIN is 4711")])
    anonymous = LongtermMemory(store, HashEmbedder(dim=32), tenant_and_session)
    assert anonymous.retrieve("bank PIN") == []


def test_the_window_does_not_open_on_a_tool_result() -> None:
    memory = ChatHistoryMemory(InMemoryStore(), SCOPE, window=2)
    calls = tuple(ToolCall(id=f"c{i}", function=FunctionCall(name="hotel", arguments="{}")) for i in range(3))
    memory.write(
        [Message(role="user", content="find hotels"), Message(role="assistant", content="", tool_calls=calls)]
    )
    memory.write([Message(role="tool", content=f"hotel {i}", tool_call_id=f"c{i}") for i in range(3)])
    memory.write([Message(role="assistant", content="Hotel 0 is cheapest.")])
    messages, _ = memory.get_context()
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool", "tool", "assistant"]


def test_recall_returns_limit_hits_besides_the_window() -> None:
    memory = LongtermMemory(
        InMemoryStore(), HashEmbedder(dim=64), SCOPE, window=3, policy=MemoryPolicy(limit=2)
    )
    memory.write([Message(role="user", content=f"a note about cats number {i}") for i in range(8)])
    items = memory.retrieve("a note about cats")
    assert [i.source for i in items] == ["recall", "recall", "history", "history", "history"]


def test_a_relevant_recalled_fact_outlives_old_small_talk_under_pressure() -> None:
    memory = LongtermMemory(InMemoryStore(), HashEmbedder(dim=256), SCOPE, window=12)
    memory.write([Message(role="user", content="I am severely allergic to peanuts.")])
    memory.write([Message(role="user", content=f"small talk {i} about the weather today") for i in range(12)])
    memory.write([Message(role="user", content="Which snacks are safe for my peanut allergy?")])
    full, full_tokens = memory.get_context()
    assert any("allergic to peanuts" in m["content"] for m in full)
    squeezed, tokens = memory.get_context(full_tokens - 20)
    assert tokens <= full_tokens - 20
    assert any("allergic to peanuts" in m["content"] for m in squeezed)
    assert not any(m["content"] == "small talk 1 about the weather today" for m in squeezed)


def test_tool_results_without_their_call_are_refused() -> None:
    store = InMemoryStore()
    memory = ChatHistoryMemory(store, SCOPE)
    with pytest.raises(InvalidRecordError):
        memory.write([Message(role="tool", content="result", tool_call_id="nobody")])
    call = ToolCall(id="c1", function=FunctionCall(name="lookup", arguments="{}"))
    memory.write([Message(role="assistant", content="", tool_calls=(call,))])
    memory.write([Message(role="tool", content="result", tool_call_id="c1")])
    assert store.count(SCOPE) == 2


def test_budget_and_window_are_checked_up_front() -> None:
    with pytest.raises(ContextBudgetError):
        ChatHistoryMemory(InMemoryStore(), SCOPE, token_limit=0)
    with pytest.raises(InvalidInputError):
        ChatHistoryMemory(InMemoryStore(), SCOPE, window=0)


def test_a_memory_owns_exactly_its_scope_not_the_agents_and_sessions_below_it() -> None:
    store = InMemoryStore()
    carol = Scope(tenant="t", user_id="carol")
    below = carol.model_copy(update={"agent_id": "coder", "session_id": "s1"})
    coder = ChatHistoryMemory(store, below)
    coder.write([Message(role="user", content="the coder's session")])
    memory = ChatHistoryMemory(store, carol)
    memory.write([Message(role="user", content="carol's own")])
    messages, _ = memory.get_context()
    assert [m["content"] for m in messages] == ["carol's own"]
    with pytest.raises(ScopeError):
        memory.write_records([MemoryRecord(scope=below, message=Message(role="user", content="x"))])
    assert memory.forget_where({"role": "user"}) == 1
    assert memory.clear() == 0
    assert [r.message.content for r in store.list(below)] == ["the coder's session"]
