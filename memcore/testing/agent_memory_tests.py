"""Conformance mixins for the agent memories, run over each store.

They check what memories promise on top of the store contract: the long-term
composition order, de-duplication, that ``clear`` empties only the memory's own
scope, that ``forget`` removes a record from every read path, and that the
token budget holds. The embedder is the dependency-free ``hash`` one.
"""

from __future__ import annotations

from typing import Any

import pytest

from memcore.agent.memories import LongtermMemory
from memcore.agent.tokens import HeuristicTokenCounter
from memcore.embedders.hashing import HashEmbedder
from memcore.records import Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.helpers import StoreFactory, StoreFixtures, new_scope, reopen, require_durable

FACTS = [
    "My cat is called Mochi and she is three years old.",
    "I am allergic to peanuts, so never suggest satay.",
    "My sister Ingrid lives in Bergen.",
    "I work as a nurse on night shifts.",
    "My favourite band is Radiohead.",
]


def _chat(memory: LongtermMemory, system: str | None = "You are a helpful assistant.") -> None:
    if system is not None:
        memory.write([Message(role="system", content=system)])
    for fact in FACTS:
        memory.write([Message(role="user", content=fact), Message(role="assistant", content="Noted.")])


class AgentMemoryConformance(StoreFixtures):
    """LongtermMemory over the store under test."""

    def memory(self, store: Store, scope: Scope, **options: Any) -> LongtermMemory:
        """The memory the tests use (the async suite drives it through its async twins)."""
        return LongtermMemory(store, HashEmbedder(dim=64), scope, **options)

    def test_composition_is_system_then_recall_then_window(self, store: Store) -> None:
        memory = self.memory(store, new_scope(agent_id="a", session_id="s1"), window=4)
        _chat(memory)
        items = memory.retrieve("What is the name of my cat Mochi?")
        roles = [item.record.message.role for item in items]
        assert roles[0] == "system"
        window = items[-4:]
        assert [item.source for item in window] == ["history"] * 4
        assert [i.record.created_at for i in window] == sorted(i.record.created_at for i in window)
        recalled = items[1:-4]
        assert recalled and all(item.source == "recall" for item in recalled)
        assert "Mochi" in recalled[0].record.message.content or any(
            "Mochi" in r.record.message.content for r in recalled
        )
        assert [r.record.created_at for r in recalled] == sorted(r.record.created_at for r in recalled)

    def test_recall_and_window_are_deduplicated(self, store: Store) -> None:
        memory = self.memory(store, new_scope(agent_id="a", session_id="s1"), window=50)
        _chat(memory)
        items = memory.retrieve("Mochi the cat")
        ids = [item.record.id for item in items]
        assert len(ids) == len(set(ids))
        assert all(item.source == "history" for item in items)

    def test_recall_reaches_other_sessions_of_the_agent_but_not_other_agents(self, store: Store) -> None:
        tenant = new_scope().tenant
        first = self.memory(store, Scope(tenant=tenant, user_id="u", agent_id="a", session_id="s1"), window=2)
        _chat(first)
        later = self.memory(store, Scope(tenant=tenant, user_id="u", agent_id="a", session_id="s2"), window=2)
        other_agent = self.memory(
            store, Scope(tenant=tenant, user_id="u", agent_id="b", session_id="s3"), window=2
        )
        assert any("peanuts" in i.record.message.content for i in later.retrieve("peanuts allergy"))
        assert other_agent.retrieve("peanuts allergy") == []

    def test_latest_user_message_is_the_default_query(self, store: Store) -> None:
        scope = new_scope(agent_id="a", session_id="s1")
        memory = self.memory(store, scope, window=2)
        _chat(memory)
        memory.write([Message(role="user", content="Remind me: what is my sister's name and city?")])
        fresh = self.memory(store, scope, window=2)
        recalled = [i.record.message.content for i in fresh.retrieve() if i.source == "recall"]
        assert any("Ingrid" in content for content in recalled)

    def test_no_user_message_means_no_recall(self, store: Store) -> None:
        memory = self.memory(store, new_scope(agent_id="a", session_id="s1"))
        memory.write([Message(role="system", content="You are terse.")])
        assert [i.source for i in memory.retrieve()] == ["history"]

    def test_clear_empties_only_the_memory_scope(self, store: Store) -> None:
        tenant = new_scope().tenant
        mine = self.memory(store, Scope(tenant=tenant, agent_id="a", session_id="s1"))
        theirs = self.memory(store, Scope(tenant=tenant, agent_id="b", session_id="s1"))
        older = self.memory(store, Scope(tenant=tenant, agent_id="a", session_id="s0"))
        for memory in (mine, theirs, older):
            _chat(memory)
        assert mine.clear() == 11
        assert store.count(Scope(tenant=tenant, agent_id="a", session_id="s1")) == 0
        assert store.count(Scope(tenant=tenant, agent_id="b")) == 11
        assert store.count(Scope(tenant=tenant, session_id="s0")) == 11

    def test_forget_removes_a_record_from_every_read_path(self, store: Store) -> None:
        scope = new_scope(agent_id="a", session_id="s1")
        memory = self.memory(store, scope, window=50)
        _chat(memory)
        [peanuts] = [r for r in store.list(scope) if "peanuts" in r.message.content]
        other = self.memory(store, new_scope(agent_id="a", session_id="s1"))
        assert other.forget([peanuts.id]) == 0
        assert memory.forget([peanuts.id]) == 1
        assert all(i.record.id != peanuts.id for i in memory.retrieve("peanuts allergy"))
        assert all(
            i.record.id != peanuts.id for i in memory.recall_block.retrieve("peanuts allergy", limit=50)
        )
        assert store.get(scope, [peanuts.id]) == []
        assert all("peanuts" not in m["content"] for m in memory.get_context()[0])

    def test_forget_where(self, store: Store) -> None:
        scope = new_scope(agent_id="a", session_id="s1")
        memory = self.memory(store, scope)
        _chat(memory)
        assert memory.forget_where({"role": "assistant"}) == len(FACTS)
        assert all(r.message.role != "assistant" for r in store.list(scope))

    def test_forget_survives_reopen(self, store: Store, open_store: StoreFactory) -> None:
        require_durable(store)
        scope = new_scope(agent_id="a", session_id="s1")
        memory = self.memory(store, scope, window=50)
        _chat(memory)
        [peanuts] = [r for r in store.list(scope) if "peanuts" in r.message.content]
        memory.forget([peanuts.id])
        reopened = reopen(store, open_store)
        try:
            again = self.memory(reopened, scope, window=50)
            assert all(i.record.id != peanuts.id for i in again.retrieve("peanuts allergy"))
            assert reopened.search(scope, text="peanuts") == []
        finally:
            reopened.close()

    @pytest.mark.parametrize("limit", [40, 60, 90, 150, 400])
    def test_token_budget_holds(self, store: Store, limit: int) -> None:
        memory = self.memory(store, new_scope(agent_id="a", session_id="s1"), window=8)
        _chat(memory, system="Be brief.")
        messages, tokens = memory.get_context(limit, query="cat and sister")
        assert tokens <= limit
        assert tokens == HeuristicTokenCounter().count([Message.model_validate(m) for m in messages])
        assert messages[0] == {"role": "system", "content": "Be brief."}
