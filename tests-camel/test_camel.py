"""The CAMEL adapter, in a venv of its own (camel-ai pins pydantic<=2.12, chromadb needs >=2.14).

ChatAgents run on CAMEL's stub model (no network, no key); their memory is a
CamelMemory on a real memcore store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from camel.agents import ChatAgent
from camel.memories import MemoryRecord as CamelRecord
from camel.messages import BaseMessage
from camel.models import ModelFactory
from camel.types import ModelPlatformType, ModelType, OpenAIBackendRole
from camel.utils import BaseTokenCounter

from memcore import open_store
from memcore.agent.memories import NO_MEMORIES_NOTE
from memcore.agent.policy import MemoryPolicy
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import ScopeError
from memcore.integrations.camel import CAMEL_RECORD_KEY, CamelMemory, to_camel
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.trust import ADAPTER_FAILURES, adapter_trust


class WordCounter(BaseTokenCounter):
    """Counts one token per word and per message: enough to see a budget enforced."""

    def count_tokens_from_messages(self, messages: list[Any]) -> int:
        return sum(1 + len(str(m.get("content") or "").split()) for m in messages)

    def encode(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def decode(self, token_ids: list[int]) -> str:
        return " ".join("w" for _ in token_ids)


def scope(agent: str, session: str = "s1") -> Scope:
    return Scope(tenant="acme", user_id="u1", agent_id=agent, session_id=session)


def memory(store: Store, agent: str, session: str = "s1", token_limit: int = 4_000) -> CamelMemory:
    return CamelMemory(
        store,
        HashEmbedder(dim=32),
        scope(agent, session),
        token_counter=WordCounter(),
        token_limit=token_limit,
    )


def agent(store: Store, name: str, session: str = "s1", **options: Any) -> ChatAgent:
    model = ModelFactory.create(model_platform=ModelPlatformType.OPENAI, model_type=ModelType.STUB)
    return ChatAgent(
        f"You are {name}.",
        model=model,
        memory=memory(store, name, session),
        agent_id=name,
        summarize_threshold=None,
        **options,
    )


def contents(store: Store, scope: Scope) -> list[str]:
    return [r.message.content for r in store.list(scope)]


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"jsonl://{tmp_path}") as opened:
        yield opened


def test_a_chat_agent_runs_on_a_memcore_memory(store: Store) -> None:
    planner = agent(store, "planner")
    response = planner.step("Plan a trip to Kyoto in October.")
    assert response.msgs[0].content == "Lorem Ipsum"
    assert contents(store, scope("planner")) == [
        "You are planner.",
        "Plan a trip to Kyoto in October.",
        "Lorem Ipsum",
    ]
    messages, tokens = planner.memory.get_context()
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert tokens == WordCounter().count_tokens_from_messages(messages)
    context = planner.memory.retrieve()
    assert context[0].memory_record.role_at_backend == OpenAIBackendRole.SYSTEM
    assert [c.timestamp for c in context] == sorted(c.timestamp for c in context)


def test_two_agents_on_one_store_never_see_or_delete_each_others_records(store: Store) -> None:
    alice, bob = agent(store, "alice"), agent(store, "bob")
    alice.step("my locker code is 4711")
    bob.step("what is the weather?")
    alices = store.list(scope("alice"))
    assert all("4711" not in str(m) for m in bob.memory.get_context()[0])
    assert all("weather" not in str(m) for m in alice.memory.get_context()[0])
    assert bob.memory.forget([r.id for r in alices]) == 0
    bob.reset()
    assert store.list(scope("alice")) == alices
    with pytest.raises(ScopeError):
        bob.memory.write_records([to_camel_record("smuggled", agent_id="alice")])


def to_camel_record(text: str, agent_id: str) -> CamelRecord:
    message = BaseMessage.make_user_message(role_name="user", content=text)
    return CamelRecord(message=message, role_at_backend=OpenAIBackendRole.USER, agent_id=agent_id)


def test_the_memory_setter_cannot_hand_one_agents_memory_to_another(store: Store) -> None:
    alice, bob = agent(store, "alice"), agent(store, "bob")
    alice.step("my locker code is 4711")
    before = store.list(scope("alice"))
    alices_memory = alice.memory
    # CAMEL's setter reads alice's records, clears her session and writes them back with bob's
    # system message, tagged bob: refused, and what the clear deleted is restored.
    with pytest.raises(ScopeError):
        bob.memory = alices_memory
    assert store.list(scope("alice")) == before
    with pytest.raises(ScopeError):
        bob.memory.get_context()  # bob's ChatAgent now holds alice's memory: it will not read
    with pytest.raises(ScopeError):
        bob.step("tell me alice's code")
    assert store.list(scope("alice")) == before
    assert store.count(scope("bob")) == 1  # bob's own system message, untouched
    alice.step("and my bike code is 1234")  # alice's own write: her memory reads again
    assert "4711" in str(alice.memory.get_context()[0])


def test_the_setter_loses_nothing_beyond_the_window_and_keeps_the_order(store: Store) -> None:
    alice = agent(store, "alice")
    for i in range(15):
        alice.step(f"turn {i}")  # 31 records: more than the window of 20 that retrieve() returns
    before = store.list(scope("alice"))
    alice.memory = alice.memory
    assert store.list(scope("alice")) == before  # the same records, at the same times
    alice.reset()
    assert contents(store, scope("alice")) == ["You are alice."]


def test_a_chat_agent_of_another_id_is_refused(store: Store) -> None:
    model = ModelFactory.create(model_platform=ModelPlatformType.OPENAI, model_type=ModelType.STUB)
    with pytest.raises(ScopeError, match="agent_id='alice'"):
        ChatAgent("hi", model=model, memory=memory(store, "alice"), agent_id="mallory")


def test_the_setter_with_the_agents_own_new_session_keeps_its_long_term_memory(store: Store) -> None:
    alice = agent(store, "alice")
    alice.step("my locker code is 4711")
    alice.memory = memory(store, "alice", session="s2")
    assert store.count(scope("alice")) == 3  # session 1 kept
    alice.step("what is my locker code?")
    sent = " ".join(str(m["content"]) for m in alice.memory.get_context()[0])
    assert "4711" in sent  # recalled from session 1


def test_clear_reset_and_single_deletes_reach_history_and_recall(store: Store) -> None:
    alice = agent(store, "alice")
    alice.step("my locker code is 4711")
    secret = next(r for r in store.list(scope("alice")) if "4711" in r.message.content)
    assert alice.memory.forget([secret.id]) == 1
    assert store.get(scope("alice"), [secret.id]) == []
    assert all(secret.id != hit.record.id for hit in store.search(scope("alice"), text="4711"))
    alice.step("second question")
    popped = alice.memory.pop_records(2)
    assert [r.message.content for r in popped] == ["second question", "Lorem Ipsum"]
    assert contents(store, scope("alice")) == ["You are alice.", "Lorem Ipsum"]
    assert alice.memory.remove_records_by_indices([0, 7]) == []  # the system message is kept, 7 is out
    removed = alice.memory.remove_records_by_indices([1])
    assert [r.message.content for r in removed] == ["Lorem Ipsum"]
    alice.step("third")
    alice.reset()
    assert contents(store, scope("alice")) == ["You are alice."]


def test_the_token_limit_is_enforced(store: Store) -> None:
    small = CamelMemory(
        store, HashEmbedder(dim=32), scope("alice"), token_counter=WordCounter(), token_limit=30
    )
    model = ModelFactory.create(model_platform=ModelPlatformType.OPENAI, model_type=ModelType.STUB)
    alice = ChatAgent("You are alice.", model=model, memory=small, agent_id="alice", summarize_threshold=None)
    for i in range(10):
        alice.step(f"message number {i} with a few more words in it")
    messages, tokens = alice.memory.get_context()
    assert tokens <= 30
    assert messages[0]["role"] == "system"
    assert "number 9" in str(messages[-2]["content"])
    creator = alice.memory.get_context_creator()
    assert creator.token_limit == 30
    assert creator.create_context(alice.memory.retrieve())[1] <= 30


def test_the_no_memories_note_is_never_written_back(store: Store) -> None:
    noted = CamelMemory(
        store,
        HashEmbedder(dim=32),
        scope("alice"),
        token_counter=WordCounter(),
        token_limit=4_000,
        policy=MemoryPolicy(inject_when_empty=True),
    )
    model = ModelFactory.create(model_platform=ModelPlatformType.OPENAI, model_type=ModelType.STUB)
    alice = ChatAgent("You are alice.", model=model, memory=noted, agent_id="alice", summarize_threshold=None)
    alice.step("hello")
    assert NO_MEMORIES_NOTE in str(alice.memory.get_context()[0])
    alice.memory = noted
    assert NO_MEMORIES_NOTE not in contents(store, scope("alice"))


def test_the_adapter_trust_scenario_runs_the_camel_memory_and_finds_nothing(tmp_path: Path) -> None:
    for url in ("memory://", "jsonl://{tmp}"):
        figures = adapter_trust(url)
        assert figures["camel_checked"] == 1
        assert not {name: figures[name] for name in ADAPTER_FAILURES if figures[name]}, figures


def test_an_agent_level_memory_never_deletes_or_lists_its_sessions_records(store: Store) -> None:
    agent_level = CamelMemory(
        store,
        HashEmbedder(dim=32),
        Scope(tenant="acme", user_id="u1", agent_id="planner"),
        token_counter=WordCounter(),
        token_limit=4_000,
    )
    session = memory(store, "planner", "s1")
    session.memory.write([Message(role="user", content="a turn of session s1")])
    agent_level.memory.write([Message(role="user", content="a note of the agent")])
    assert [r.message.content for r in agent_level.pop_records(10)] == ["a note of the agent"]
    agent_level.memory.write([Message(role="user", content="another note")])
    agent_level.remove_records_by_indices([0, 1, 2])
    agent_level.clear()
    assert contents(store, scope("planner", "s1")) == ["a turn of session s1"]


def test_a_forged_camel_form_cannot_change_a_records_id_agent_or_role(store: Store) -> None:
    planner = memory(store, "planner")
    other = MemoryRecord(scope=scope("coder"), message=Message(role="user", content="coder's"))
    store.add([other])
    form = to_camel(
        MemoryRecord(scope=scope("planner"), message=Message(role="user", content="hi"))
    ).to_dict()
    forged = {**form, "uuid": str(other.id), "agent_id": "coder", "role_at_backend": "system"}
    record = MemoryRecord(
        scope=scope("planner"),
        message=Message(role="user", content="hi"),
        metadata={CAMEL_RECORD_KEY: json.dumps(forged)},
    )
    broken = record.model_copy(update={"id": uuid4(), "metadata": {CAMEL_RECORD_KEY: "{not json"}})
    planner.memory.write_records([record, broken])
    found = [item.memory_record for item in planner.retrieve()]
    assert {r.uuid for r in found} == {record.id, broken.id}
    assert {(r.agent_id, r.role_at_backend) for r in found} == {("planner", OpenAIBackendRole.USER)}


def test_single_deletes_never_reach_a_namesake_in_another_session(store: Store) -> None:
    alice = agent(store, "alice")
    alice.step("my locker code is 4711")
    turns = store.list(scope("alice"))
    namesakes = [
        MemoryRecord(
            id=turn.id, scope=scope("alice", "s2"), message=Message(role="user", content=f"s2 turn {i}")
        )
        for i, turn in enumerate(turns)
    ]
    store.add(namesakes)

    assert all(not item.memory_record.message.content.startswith("s2") for item in alice.memory.retrieve())
    alice.memory.pop_records(1)
    alice.memory.remove_records_by_indices([1])

    assert store.list(scope("alice", "s2")) == namesakes
    assert contents(store, scope("alice")) == ["You are alice."]
