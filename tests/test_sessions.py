"""Sessions: load and commit on any store, exact round-trips, summarisation that keeps originals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memcore.agent.memories import VectorMemory
from memcore.agent.policy import MemoryPolicy
from memcore.agent.sessions import (
    ExtractiveSummarizer,
    LLMSummarizer,
    MemoryModel,
    SessionMemory,
    SessionTurn,
)
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import ConflictError, InvalidInputError, InvalidRecordError, ScopeError
from memcore.records import SUMMARY_KIND, FunctionCall, Message, ToolCall
from memcore.scope import Scope
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore

OWNER = Scope(tenant="t", user_id="u", agent_id="a")


def _conversation(model: MemoryModel, turns: int) -> None:
    for i in range(turns):
        model.append(Message(role="user", content=f"Fact number {i}: my locker code is {1000 + i}. Thanks."))
        model.append(Message(role="assistant", content=f"Stored fact {i}. Anything else?"))


def test_load_commit_round_trip(tmp_path: Path) -> None:
    with JsonlStore(tmp_path / "s") as store:
        sessions = SessionMemory(store, OWNER, summarize_over=None)
        model = sessions.load("chat-1")
        assert model.turns == [] and model.summary is None
        call = ToolCall(id="c1", function=FunctionCall(name="lookup", arguments='{"q": "x"}'))
        model.append(Message(role="user", content="look it up"))
        model.append(Message(role="assistant", content="", tool_calls=(call,)))
        model.append(Message(role="tool", content="found", tool_call_id="c1"))
        committed = sessions.commit("chat-1", model)
        assert committed.turns == model.turns and committed.revision is not None
    with JsonlStore(tmp_path / "s") as store:
        loaded = SessionMemory(store, OWNER).load("chat-1")
        assert loaded == committed
        assert MemoryModel.model_validate(loaded.model_dump()) == loaded
        assert MemoryModel.model_validate_json(loaded.model_dump_json()) == loaded


def test_commit_removes_turns_dropped_from_the_model() -> None:
    store = InMemoryStore()
    sessions = SessionMemory(store, OWNER, summarize_over=None)
    model = sessions.load("s")
    _conversation(model, 2)
    model = sessions.commit("s", model)
    del model.turns[1]
    model = sessions.commit("s", model)
    assert [t.message.content for t in sessions.load("s").turns] == [t.message.content for t in model.turns]
    assert store.count(sessions.session_scope("s")) == 3


def test_orphan_tool_results_are_refused() -> None:
    model = MemoryModel(session_id="s")
    with pytest.raises(InvalidRecordError):
        model.append(Message(role="tool", content="result", tool_call_id="nobody"))
    with pytest.raises(InvalidRecordError):
        MemoryModel.model_validate(
            {"session_id": "s", "turns": [{"message": {"role": "tool", "content": "x", "tool_call_id": "c"}}]}
        )


def test_invalid_session_ids_and_scopes() -> None:
    sessions = SessionMemory(InMemoryStore(), OWNER)
    for bad in ("", "../x", "a/b"):
        with pytest.raises(ScopeError):
            sessions.load(bad)
    with pytest.raises(ScopeError):
        SessionMemory(InMemoryStore(), Scope(tenant="t", session_id="s"))
    with pytest.raises(InvalidInputError):
        sessions.commit("other", MemoryModel(session_id="s"))


def test_summarises_older_turns_and_keeps_originals_recallable() -> None:
    store, embedder = InMemoryStore(), HashEmbedder(dim=64)
    sessions = SessionMemory(store, OWNER, embedder=embedder, summarize_over=200, keep_recent=4)
    model = sessions.load("long")
    _conversation(model, 10)
    committed = sessions.commit("long", model)
    assert committed.summary is not None and "Fact number 0" in committed.summary
    assert len(committed.turns) == 4
    [summary] = store.list(sessions.session_scope("long"), filter={"kind": SUMMARY_KIND})
    assert set(summary.metadata["covers"]) == {str(t.id) for t in model.turns[:16]}  # type: ignore[arg-type]
    assert "extends" not in summary.metadata
    assert sessions.load("long") == committed
    prompt = committed.to_messages()
    assert prompt[0].role == "system" and "Fact number 0" in prompt[0].content
    recall = VectorMemory(store, embedder, Scope(tenant="t", user_id="u", agent_id="a", session_id="long"))
    hits = recall.retrieve("Fact number 2 locker code")
    assert any("Fact number 2:" in hit.record.message.content for hit in hits)


def test_summaries_accumulate() -> None:
    sessions = SessionMemory(InMemoryStore(), OWNER, summarize_over=100, keep_recent=2)
    model = sessions.load("s")
    _conversation(model, 4)
    model = sessions.commit("s", model)
    first_summary = model.summary
    _conversation(model, 4)
    model = sessions.commit("s", model)
    assert model.summary is not None and first_summary is not None
    assert model.summary != first_summary and len(model.turns) == 2
    assert sessions.load("s") == model
    first, second = sessions.store.list(sessions.session_scope("s"), filter={"kind": SUMMARY_KIND})
    assert second.metadata["extends"] == str(first.id)
    assert not set(first.metadata["covers"]) & set(second.metadata["covers"])  # type: ignore[arg-type]


def test_summarising_never_splits_a_tool_call_from_its_result() -> None:
    sessions = SessionMemory(InMemoryStore(), OWNER, summarize_over=10, keep_recent=1)
    model = sessions.load("s")
    model.append(Message(role="user", content="what's the weather in Oslo today, please?"))
    call = ToolCall(id="c1", function=FunctionCall(name="weather", arguments='{"city": "Oslo"}'))
    model.append(Message(role="assistant", content="", tool_calls=(call,)))
    model.append(Message(role="tool", content="sunny", tool_call_id="c1"))
    committed = sessions.commit("s", model)
    assert [t.message.role for t in committed.turns] == ["assistant", "tool"]


def test_the_system_prompt_survives_summarisation() -> None:
    sessions = SessionMemory(InMemoryStore(), OWNER, summarize_over=60, keep_recent=2)
    model = sessions.load("s")
    model.append(Message(role="system", content="You are terse."))
    _conversation(model, 4)
    committed = sessions.commit("s", model)
    assert committed.summary is not None
    prompt = committed.to_messages()
    assert prompt[0] == Message(role="system", content="You are terse.")
    assert prompt[1].content.startswith("Summary of the earlier conversation")
    assert sessions.load("s").to_messages()[0].content == "You are terse."


def test_a_concurrent_commit_is_refused_not_lost() -> None:
    sessions = SessionMemory(InMemoryStore(), OWNER, summarize_over=None)
    base = sessions.load("s")
    base.append(Message(role="user", content="hello"))
    base = sessions.commit("s", base)
    worker_a, worker_b = sessions.load("s"), sessions.load("s")
    worker_a.append(Message(role="assistant", content="reply from A"))
    worker_b.append(Message(role="assistant", content="reply from B"))
    sessions.commit("s", worker_a)
    with pytest.raises(ConflictError):
        sessions.commit("s", worker_b)
    with pytest.raises(ConflictError):
        sessions.commit("s", MemoryModel(session_id="s"))
    assert [t.message.content for t in sessions.load("s").turns] == ["hello", "reply from A"]


def test_turns_must_stay_in_time_order() -> None:
    sessions = SessionMemory(InMemoryStore(), OWNER, summarize_over=None)
    model = sessions.load("s")
    first = model.append(Message(role="user", content="first"))
    model.turns.insert(0, SessionTurn(message=Message(role="system", content="inserted later")))
    with pytest.raises(InvalidRecordError):
        sessions.commit("s", model)
    assert first.created_at < model.turns[0].created_at


def test_forgetting_a_tool_call_leaves_the_session_loadable() -> None:
    store = InMemoryStore()
    sessions = SessionMemory(store, OWNER, summarize_over=None)
    model = sessions.load("s")
    call = ToolCall(id="c1", function=FunctionCall(name="lookup", arguments="{}"))
    model.append(Message(role="user", content="look it up"))
    call_turn = model.append(Message(role="assistant", content="", tool_calls=(call,)))
    model.append(Message(role="tool", content="found", tool_call_id="c1"))
    sessions.commit("s", model)
    store.delete(sessions.session_scope("s"), [call_turn.id])
    assert [t.message.content for t in sessions.load("s").turns] == ["look it up"]


def test_extractive_summary_is_bounded_and_keeps_latest() -> None:
    summarizer = ExtractiveSummarizer(max_chars=120, max_line_chars=40)
    messages = [Message(role="user", content=f"Sentence {i} is here. And more.") for i in range(20)]
    summary = summarizer.summarize(messages, previous="user: old fact")
    assert len(summary) <= 120 and "Sentence 19 is here." in summary and "old fact" not in summary


def test_llm_summarizer_hook() -> None:
    seen: list[list[dict[str, Any]]] = []

    def complete(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "  The user likes tea.  "

    summary = LLMSummarizer(complete).summarize([Message(role="user", content="I like tea")], previous="x")
    assert summary == "The user likes tea."
    assert seen[0][0]["role"] == "system" and "I like tea" in seen[0][1]["content"]
    with pytest.raises(InvalidInputError):
        LLMSummarizer(lambda messages: "").summarize([Message(role="user", content="x")], None)


def test_policy_default_reach_matches_sessions_owner() -> None:
    assert MemoryPolicy().recall_scope(Scope(session_id="s", **dict(OWNER.items()))) == OWNER


def test_a_users_session_is_not_the_same_named_session_of_the_users_agent() -> None:
    store = InMemoryStore()
    user_sessions = SessionMemory(store, Scope(tenant="t", user_id="dave"), summarize_over=None)
    agent_sessions = SessionMemory(
        store, Scope(tenant="t", user_id="dave", agent_id="coder"), summarize_over=None
    )
    agent_model = agent_sessions.load("s1")
    agent_model.append(Message(role="user", content="the coder agent's turn"))
    agent_sessions.commit("s1", agent_model)
    mine = user_sessions.load("s1")
    assert mine.turns == [] and mine.revision is None
    mine.append(Message(role="user", content="dave's own turn"))
    user_sessions.commit("s1", mine)
    assert [t.message.content for t in agent_sessions.load("s1").turns] == ["the coder agent's turn"]
    assert [t.message.content for t in user_sessions.load("s1").turns] == ["dave's own turn"]
