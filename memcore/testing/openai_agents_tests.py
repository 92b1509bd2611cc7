"""The OpenAI Agents SDK session's guarantees, as a pytest mixin every store's test module includes.

    import pytest
    from memcore.testing.openai_agents_tests import AgentsSessionTests

    class TestAgentsSessionOnMyStore(AgentsSessionTests):
        @pytest.fixture
        def memcore_store(self, tmp_path):
            with MyStore(tmp_path / "db") as store:  # a fresh, empty store
                yield store

What it proves of :class:`~memcore.integrations.openai_agents.MemcoreSession` on that store,
offline (the SDK's own ``agents.testing.ScriptedModel``, the ``hash`` embedder):

* the SDK's ``Runner`` (``run`` and ``run_streamed``) runs two turns with a function tool on one
  session, and the second model call is given exactly the first turn's items (the user message,
  the ``function_call``, its ``function_call_output``, the assistant message) and the new message;
* items added in one call come back in their order, and ``get_items(limit)`` is the latest ones,
  oldest first;
* ``pop_item`` deletes the latest item from every read path: ``get_items``, and the store's
  search by vector (the session's embedder), keywords and text in the session's scope;
* ``clear_session`` deletes this session's items only: another session of the agent and the other
  records of the session's own scope (an agent memory's turns) stay;
* records of other scopes (a sibling session, the agent, the user, another user, another tenant...)
  carrying the session's kind and well-formed forged item metadata are never returned, popped
  or cleared;
* ``recall_input_callback`` recalls another session's item of the same agent, by vector or by
  keywords, never another user's nor the session's own, and the recall message is never stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast
from uuid import UUID

import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import TResponseInputItem, TResponseOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from memcore.embedders.base import Embedder
from memcore.embedders.hashing import HashEmbedder
from memcore.integrations.openai_agents import ITEM_KEY, ITEM_KIND, OWNER_KEY, TYPE_KEY, MemcoreSession
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store

Item = dict[str, Any]
"""An SDK item as a plain JSON object."""

OWNER = Scope(tenant="acme", user_id="alice", agent_id="travel")
"""The owner of the sessions the tests open (a user's agent)."""

NEIGHBOURS = [
    Scope(tenant="acme"),
    Scope(tenant="acme", user_id="alice"),
    OWNER,
    Scope(tenant="acme", user_id="alice", agent_id="travel", session_id="s2"),
    Scope(tenant="acme", user_id="alice", agent_id="coder", session_id="s1"),
    Scope(tenant="acme", user_id="alice", session_id="s1"),
    Scope(tenant="acme", user_id="bob", agent_id="travel", session_id="s1"),
    Scope(tenant="other", user_id="alice", agent_id="travel", session_id="s1"),
]
"""Every scope near session ``s1`` of :data:`OWNER`: its ancestors, its sibling, the same session
id under another agent, user, or tenant, and directly under the user."""


def hash_embedder() -> Embedder:
    """The ``hash`` embedder (fast, offline)."""
    return HashEmbedder()


def session_of(store: Store, session_id: str = "s1", scope: Scope = OWNER, **options: Any) -> MemcoreSession:
    """A session of ``scope`` (default :data:`OWNER`) on ``store``."""
    return MemcoreSession(session_id, store, scope, **options)


def plain(items: list[TResponseInputItem]) -> list[Item]:
    """``items`` as plain dicts."""
    return [dict(item) for item in items]


def scripted(*turns: list[TResponseOutputItem]) -> ScriptedModel:
    """The SDK's scripted model, answering each call with the next of ``turns``."""
    return ScriptedModel(list(turns))


def inputs(model: ScriptedModel) -> list[list[Item]]:
    """What the model was given at each call, as JSON values."""
    given = [
        [{"role": "user", "content": c.input}] if isinstance(c.input, str) else c.input for c in model.calls
    ]
    return cast(list[list[Item]], json.loads(json.dumps(given)))


async def run_agent(method: str, agent: Agent[Any], turn_input: Any, **options: Any) -> Any:
    """The final output of ``Runner.run`` (``method="run"``) or of ``Runner.run_streamed``, its
    events consumed."""
    if method == "run":
        return (await Runner.run(agent, turn_input, **options)).final_output
    streamed = Runner.run_streamed(agent, turn_input, **options)
    async for _ in streamed.stream_events():
        pass
    return streamed.final_output


def say(text: str) -> TResponseOutputItem:
    """A scripted assistant message."""
    return assistant_message(text, item_id="msg_1")


def call(name: str, arguments: str, call_id: str = "call_1") -> TResponseOutputItem:
    """A scripted function call."""
    return function_call(name, arguments, call_id=call_id, item_id="fc_1")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def forged(scope: Scope, digest: str, text: str) -> MemoryRecord:
    """A record of ``scope`` carrying the session's kind, owner digest and a well-formed item."""
    item = json.dumps({"role": "user", "content": text})
    metadata = {ITEM_KEY: item, TYPE_KEY: "message", OWNER_KEY: digest}
    return MemoryRecord(
        scope=scope, message=Message(role="user", content=text), kind=ITEM_KIND, metadata=metadata
    )


async def remember_elsewhere(store: Store, embedder: Embedder | None) -> None:
    """Items of session ``old`` of :data:`OWNER` (a cat, a tool round trip), and of bob's ``old``."""
    await session_of(store, "old", embedder=embedder).add_items(
        [
            {"role": "user", "content": "My cat is called Mochi."},
            {"type": "function_call", "call_id": "c9", "name": "lookup_cat", "arguments": '{"cat": "Mochi"}'},
            {"type": "function_call_output", "call_id": "c9", "output": "cat Mochi: tabby"},
        ]
    )
    bob = Scope(tenant="acme", user_id="bob", agent_id="travel")
    await session_of(store, "old", bob, embedder=embedder).add_items(
        [{"role": "user", "content": "My cat is called Rex."}]
    )


async def _scopes_and_ids(store: Store) -> set[tuple[Scope, UUID]]:
    records = [*await store.alist(Scope(tenant="acme")), *await store.alist(Scope(tenant="other"))]
    return {(record.scope, record.id) for record in records}


class AgentsSessionTests:
    """``MemcoreSession`` on one memcore store. Override :meth:`memcore_store`."""

    @pytest.fixture
    def memcore_store(self) -> Iterator[Store]:
        """A fresh, empty memcore store (the backend's test module overrides this)."""
        raise NotImplementedError("override the memcore_store fixture")
        yield  # pragma: no cover

    @pytest.fixture(autouse=True)
    def _no_tracing(self) -> None:
        set_tracing_disabled(True)  # the SDK would try to export traces to OpenAI

    @pytest.mark.parametrize("method", ["run", "run_streamed"])
    async def test_runner_two_turns_the_second_sees_the_first_with_its_tool_round_trip(
        self, memcore_store: Store, method: str
    ) -> None:
        session = session_of(memcore_store)
        model = scripted(
            [call("get_weather", '{"city": "Paris"}')],
            [say("It is sunny in Paris.")],
            [say("You asked about Paris.")],
        )
        agent = Agent(name="travel", model=model, tools=[get_weather])

        assert await run_agent(method, agent, "Weather in Paris?", session=session) == "It is sunny in Paris."
        first_turn = plain(await session.get_items())
        assert [(item.get("type"), item.get("role")) for item in first_turn] == [
            (None, "user"),
            ("function_call", None),
            ("function_call_output", None),
            ("message", "assistant"),
        ]
        assert first_turn[1]["arguments"] == '{"city": "Paris"}' and first_turn[1]["call_id"] == "call_1"
        assert first_turn[2] == {
            "call_id": "call_1",
            "output": "Sunny in Paris",
            "type": "function_call_output",
        }
        assert inputs(model)[1] == first_turn[:3]  # the tool's output went back to the model

        assert await run_agent(method, agent, "What did I ask?", session=session) == "You asked about Paris."
        assert inputs(model)[2] == [*first_turn, {"role": "user", "content": "What did I ask?"}]
        stored = plain(await session.get_items())
        assert stored[:-1] == inputs(model)[2]
        assert stored[-1]["content"][0]["text"] == "You asked about Paris."
        tool_records = await memcore_store.alist(session.scope.exact(), filter={"role": "tool"})
        assert [r.message.tool_call_id for r in tool_records] == ["call_1"]
        assert [r.message.content for r in tool_records] == ["Sunny in Paris"]

    async def test_fifty_items_in_one_call_keep_their_order_and_pop_goes_newest_first(
        self, memcore_store: Store
    ) -> None:
        session = session_of(memcore_store)
        items = [{"role": "user", "content": f"item {i:02d}"} for i in range(50)]
        await session.add_items(cast(list[TResponseInputItem], items))
        await session.add_items([{"role": "user", "content": "item 50"}])
        assert [i["content"] for i in plain(await session.get_items())] == [
            f"item {i:02d}" for i in range(51)
        ]
        assert [i["content"] for i in plain(await session.get_items(limit=3))] == [
            "item 48",
            "item 49",
            "item 50",
        ]
        popped = [await session.pop_item() for _ in range(3)]
        assert [cast(Item, p)["content"] for p in popped] == ["item 50", "item 49", "item 48"]
        assert [i["content"] for i in plain(await session.get_items(limit=2))] == ["item 46", "item 47"]

    async def test_pop_deletes_the_record_from_every_read_path(self, memcore_store: Store) -> None:
        embedder = hash_embedder()
        session = session_of(memcore_store, embedder=embedder)
        await session.add_items(
            [{"role": "user", "content": "keep me"}, {"role": "user", "content": "my PIN is 4321"}]
        )
        [record] = await memcore_store.alist(
            session.scope.exact(), filter={"kind": ITEM_KIND}, order="desc", limit=1
        )
        assert record.message.content == "my PIN is 4321"
        assert await session.pop_item() == {"role": "user", "content": "my PIN is 4321"}
        assert plain(await session.get_items()) == [{"role": "user", "content": "keep me"}]
        assert await memcore_store.aget(session.scope, [record.id]) == []
        if memcore_store.capabilities.text_search:
            assert await memcore_store.asearch(session.scope, text="4321") == []
        assert await memcore_store.asearch(session.scope, keywords="PIN 4321") == []
        hits = await memcore_store.asearch(
            session.scope, vector=embedder.embed(["my PIN is 4321"])[0], limit=10
        )
        assert [hit.record.message.content for hit in hits] == ["keep me"]

    async def test_clear_session_deletes_this_sessions_items_only(self, memcore_store: Store) -> None:
        session, sibling = session_of(memcore_store, "s1"), session_of(memcore_store, "s2")
        turn = MemoryRecord(
            scope=session.scope, message=Message(role="user", content="an agent memory's turn")
        )
        await memcore_store.aadd([turn])
        await session.add_items(
            [{"role": "user", "content": "mine 1"}, {"role": "user", "content": "mine 2"}]
        )
        await sibling.add_items([{"role": "user", "content": "sibling session"}])

        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None
        assert plain(await sibling.get_items()) == [{"role": "user", "content": "sibling session"}]
        left = await memcore_store.alist(session.scope.exact())
        assert [(r.id, r.message.content) for r in left] == [(turn.id, "an agent memory's turn")]
        await session.add_items([{"role": "user", "content": "after"}])
        assert plain(await session.get_items()) == [{"role": "user", "content": "after"}]

    async def test_forged_items_of_other_scopes_are_never_returned_popped_or_cleared(
        self, memcore_store: Store
    ) -> None:
        session = session_of(memcore_store)
        planted = [forged(scope, session.scope.digest(), f"forged in {scope}") for scope in NEIGHBOURS]
        await memcore_store.aadd(planted)

        assert await session.get_items() == [] and await session.get_items(limit=3) == []
        assert await session.pop_item() is None
        await session.add_items([{"role": "user", "content": "mine"}])
        assert plain(await session.get_items()) == [{"role": "user", "content": "mine"}]
        assert plain(await session.get_items(limit=5)) == [{"role": "user", "content": "mine"}]
        before = await _scopes_and_ids(memcore_store)
        assert await session.pop_item() == {"role": "user", "content": "mine"}
        assert await session.pop_item() is None
        await session.add_items([{"role": "user", "content": "mine again"}])
        await session.clear_session()
        after = await _scopes_and_ids(memcore_store)
        assert after == {key for key in before if key[0] != session.scope}
        assert after == {(record.scope, record.id) for record in planted}

    @pytest.mark.parametrize("embedded", [True, False], ids=["embedder", "keywords"])
    async def test_recall_brings_another_sessions_item_never_another_users_and_is_never_stored(
        self, memcore_store: Store, embedded: bool
    ) -> None:
        embedder = hash_embedder() if embedded else None
        await remember_elsewhere(memcore_store, embedder)
        session = session_of(memcore_store, "new", embedder=embedder)
        model = scripted([say("Noted.")], [say("Mochi.")])
        agent = Agent(name="travel", model=model)
        config = RunConfig(session_input_callback=session.recall_input_callback)
        await Runner.run(agent, "I fly to Oslo on Monday.", session=session, run_config=config)
        await Runner.run(agent, "What is my cat called?", session=session, run_config=config)

        recalled = [i for i in inputs(model)[1] if i.get("role") == "developer"]
        assert len(recalled) == 1
        assert "- (user) My cat is called Mochi." in recalled[0]["content"]
        assert "Rex" not in recalled[0]["content"] and "tabby" not in recalled[0]["content"]
        assert "Oslo" not in recalled[0]["content"]  # the session's own items are the history
        assert inputs(model)[1][-2:] == [recalled[0], {"role": "user", "content": "What is my cat called?"}]
        stored = plain(await session.get_items())
        assert [i.get("role") for i in stored] == ["user", "assistant", "user", "assistant"]
        assert "memcore recall" not in json.dumps(stored)
        assert await memcore_store.acount(session.scope.exact()) == 4 and not session._recalled
