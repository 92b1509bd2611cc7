"""The OpenAI Agents SDK session: the guarantees every backend proves
(:mod:`memcore.testing.openai_agents_tests`) on memory:// and jsonl://, then the SDK's Runner on its
own scripted model (``agents.testing``), the SDK's own session tests run side by side with its
SQLiteSession, and memcore's lossless items, typed errors, scoping and recall on top."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, set_tracing_disabled
from agents.items import TResponseInputItem
from agents.memory import Session, SessionABC, SessionSettings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore import open_embedder, open_store
from memcore.agent.memories import LongtermMemory
from memcore.errors import InvalidInputError, InvalidLimitError, RecordTooLargeError, ScopeError
from memcore.integrations.openai_agents import ITEM_KEY, ITEM_KIND, TYPE_KEY, MemcoreSession, readable_message
from memcore.records import MemoryRecord, Message, utc_now
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing import ManualClock
from memcore.testing.openai_agents_tests import (
    OWNER,
    AgentsSessionTests,
    Item,
    call,
    get_weather,
    inputs,
    plain,
    remember_elsewhere,
    run_agent,
    say,
    scripted,
    session_of,
)


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)  # the SDK would try to export traces to OpenAI
    yield


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = "memory://" if request.param == "memory" else f"jsonl://{tmp_path / 'store'}"
    with open_store(url) as opened:
        yield opened


@pytest.fixture()
def mem_store() -> Iterator[Store]:
    with open_store("memory://") as opened:
        yield opened


# -- the guarantees every backend proves (memcore.testing.openai_agents_tests) ----------------------


class TestAgentsSessionOnTheBuiltInStores(AgentsSessionTests):
    @pytest.fixture
    def memcore_store(self, store: Store) -> Store:
        return store  # memory:// and jsonl://, the module's store fixture


# -- the Session protocol --------------------------------------------------------------------------


def test_it_is_an_sdk_session_with_the_protocols_signatures(mem_store: Store) -> None:
    session: Session = session_of(mem_store)  # mypy checks the protocol structurally
    assert isinstance(session, Session)
    for name in ("get_items", "add_items", "pop_item", "clear_session"):
        ours, theirs = getattr(MemcoreSession, name), getattr(SessionABC, name)
        assert inspect.iscoroutinefunction(ours)
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters)
    assert session.session_id == "s1" and session.session_settings == SessionSettings()


def test_run_sync_keeps_the_history_across_two_turns(mem_store: Store) -> None:
    session = session_of(mem_store)
    model = scripted([say("Hello Alice.")], [say("You are Alice.")])
    agent = Agent(name="travel", model=model)
    assert Runner.run_sync(agent, "I am Alice.", session=session).final_output == "Hello Alice."
    assert Runner.run_sync(agent, "Who am I?", session=session).final_output == "You are Alice."
    assert [item.get("content") for item in inputs(model)[1]][::2] == ["I am Alice.", "Who am I?"]
    assert len(inputs(model)[1]) == 3


async def test_a_reopened_store_in_a_new_process_gives_the_same_items(tmp_path: Path) -> None:
    url = f"jsonl://{tmp_path / 'store'}"
    with open_store(url) as store:
        model = scripted([call("get_weather", '{"city": "Oslo"}')], [say("Sunny in Oslo.")])
        agent = Agent(name="travel", model=model, tools=[get_weather])
        await Runner.run(agent, "Weather in Oslo?", session=session_of(store))
        written = plain(await session_of(store).get_items())
    code = (
        "import asyncio, json, sys\n"
        "from memcore import Scope, open_store\n"
        "from memcore.integrations.openai_agents import MemcoreSession\n"
        "store = open_store(sys.argv[1])\n"
        "session = MemcoreSession('s1', store, Scope(tenant='acme', user_id='alice', agent_id='travel'))\n"
        "print(json.dumps(asyncio.run(session.get_items())))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == written
    assert [item.get("type") for item in written] == [
        None,
        "function_call",
        "function_call_output",
        "message",
    ]


# -- the SDK's own session tests (tests/memory/test_session*.py), SQLiteSession beside memcore -----

Factory = Callable[[str], Any]


@pytest.fixture(params=["sqlite", "memcore"])
def make_session(request: pytest.FixtureRequest, mem_store: Store, tmp_path: Path) -> Iterator[Factory]:
    opened: list[SQLiteSession] = []

    def make(session_id: str, **options: Any) -> Any:
        if request.param == "memcore":
            return session_of(mem_store, session_id, **options)
        sqlite = SQLiteSession(session_id, tmp_path / "sessions.db", **options)
        opened.append(sqlite)
        return sqlite

    yield make
    for sqlite in opened:
        sqlite.close()


async def test_sdk_direct_add_get_clear(make_session: Factory) -> None:
    session = make_session("direct_test")
    await session.add_items(
        [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]
    )
    assert [(i["role"], i["content"]) for i in await session.get_items()] == [
        ("user", "Hello"),
        ("assistant", "Hi there!"),
    ]
    await session.clear_session()
    assert await session.get_items() == []


async def test_sdk_pop_item_including_from_an_empty_session(make_session: Factory) -> None:
    session = make_session("pop_test")
    assert await session.pop_item() is None
    contents = ["Hello", "Hi there!", "How are you?"]
    await session.add_items(
        [{"role": r, "content": c} for r, c in zip(["user", "assistant", "user"], contents, strict=True)]
    )
    for expected in reversed(contents):
        popped = await session.pop_item()
        assert popped is not None and popped["content"] == expected
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_sdk_pop_affects_only_its_session(make_session: Factory) -> None:
    one, two = make_session("session_1"), make_session("session_2")
    await one.add_items([{"role": "user", "content": "Session 1 message"}])
    await two.add_items([{"role": "user", "content": f"Session 2 message {i}"} for i in (1, 2)])
    assert (await two.pop_item())["content"] == "Session 2 message 2"
    assert [i["content"] for i in await one.get_items()] == ["Session 1 message"]
    assert [i["content"] for i in await two.get_items()] == ["Session 2 message 1"]


async def test_sdk_get_items_limit_is_the_latest_n_in_order(make_session: Factory) -> None:
    session = make_session("count_test")
    contents = [f"{kind} {n}" for n in (1, 2, 3) for kind in ("Message", "Response")]
    await session.add_items([{"role": "user", "content": c} for c in contents])
    for limit, expected in [
        (None, contents),
        (2, contents[-2:]),
        (4, contents[-4:]),
        (10, contents),
        (0, []),
    ]:
        assert [i["content"] for i in await session.get_items(limit=limit)] == expected


async def test_sdk_unicode_and_sql_like_content(make_session: Factory) -> None:
    session = make_session("special")
    contents = ["こんにちは", "😊👍", "Привет", "O'Reilly", "Robert'); DROP TABLE students;--", '"a" \\ \n']
    await session.add_items([{"role": "user", "content": c} for c in contents])
    assert [i["content"] for i in await session.get_items()] == contents


async def test_sdk_concurrent_adds_all_land(make_session: Factory) -> None:
    session = make_session("concurrent_test")
    await asyncio.gather(
        *(session.add_items([{"role": "user", "content": f"Message {i}"}]) for i in range(10))
    )
    assert {i["content"] for i in await session.get_items()} == {f"Message {i}" for i in range(10)}


async def test_sdk_session_settings_limit_is_the_default_limit(make_session: Factory) -> None:
    session = make_session("settings", session_settings=SessionSettings(limit=2))
    await session.add_items([{"role": "user", "content": str(i)} for i in range(5)])
    assert [i["content"] for i in await session.get_items()] == ["3", "4"]
    assert [i["content"] for i in await session.get_items(limit=3)] == ["2", "3", "4"]


async def _run_turns(
    session: Any, turns: list[tuple[str | list[Item], str, RunConfig | None]], method: str = "run"
) -> tuple[list[list[Item]], list[Item]]:
    """Run ``turns`` (input, canned reply, run config) on ``session``: the model's inputs, the items."""
    model = scripted(*([say(reply)] for _, reply, _ in turns))
    agent = Agent(name="test", model=model)
    for turn_input, reply, config in turns:
        assert await run_agent(method, agent, turn_input, session=session, run_config=config) == reply
    return inputs(model), plain(await session.get_items())


def _limited(limit: int | None) -> RunConfig:
    return RunConfig(session_settings=SessionSettings(limit=limit))


RUNNER_SCENARIOS: dict[str, list[tuple[str | list[Item], str, RunConfig | None]]] = {
    "two turns": [
        ("What city is the Golden Gate Bridge in?", "San Francisco", None),
        ("Its state?", "CA", None),
    ],
    "limit 2": [(f"Message {i}", f"Reply {i}", None) for i in (1, 2, 3)]
    + [("Message 4", "Reply 4", _limited(2))],
    "limit 0": [("Message 1", "Reply 1", None), ("Message 2", "Reply 2", _limited(0))],
    "limit none": [(f"Message {i}", f"Reply {i}", _limited(None)) for i in range(1, 5)],
    "limit 100": [("Message 1", "Reply 1", None), ("Message 2", "Reply 2", _limited(100))],
    "list input": [("Hello.", "Hi.", None), ([{"role": "user", "content": "And now?"}], "Now.", None)],
    "callback": [
        ("Hello there.", "Hi, I'm here to assist you.", None),
        (
            [{"role": "user", "content": "What is your name?"}],
            "I'm a test",
            RunConfig(
                session_input_callback=lambda history, new: [i for i in history if i["role"] == "user"] + new
            ),
        ),
    ],
}


@pytest.mark.parametrize("method", ["run", "run_streamed"])
@pytest.mark.parametrize("scenario", list(RUNNER_SCENARIOS))
async def test_sdk_runner_scenarios_give_the_same_inputs_and_history_as_sqlite(
    scenario: str, method: str, mem_store: Store, tmp_path: Path
) -> None:
    sqlite = SQLiteSession("s1", tmp_path / "runner.db")
    try:
        expected = await _run_turns(sqlite, RUNNER_SCENARIOS[scenario], method)
    finally:
        sqlite.close()
    assert len(expected[0]) == len(RUNNER_SCENARIOS[scenario])
    assert await _run_turns(session_of(mem_store), RUNNER_SCENARIOS[scenario], method) == expected


async def test_sdk_different_sessions_keep_separate_histories(mem_store: Store) -> None:
    one, two = session_of(mem_store, "session_1"), session_of(mem_store, "session_2")
    inputs, _ = await _run_turns(one, [("I like cats", "Cats", None)])
    await _run_turns(two, [("I like dogs", "Dogs", None)])
    inputs, items = await _run_turns(one, [("What did I say I like?", "Cats", None)])
    assert [i.get("content") for i in inputs[0]][::2] == ["I like cats", "What did I say I like?"]
    assert "I like dogs" not in json.dumps(items)


ITEMS = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=12)},
) | st.builds(
    lambda call_id, output: {"type": "function_call_output", "call_id": call_id, "output": output},
    st.text("abc_1", min_size=1, max_size=6),
    st.text(max_size=12),
)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(ITEMS, max_size=4)),
        st.tuples(st.just("get"), st.none() | st.integers(0, 6)),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_any_sequence_of_operations_answers_as_sqlite_does(
    operations: list[tuple[str, Any]], mem_store: Store
) -> None:
    async def run(session: Any) -> list[Any]:
        answers: list[Any] = []
        for name, argument in operations:
            if name == "add":
                answers.append(await session.add_items(argument))
            elif name == "get":
                answers.append(await session.get_items(limit=argument))
            elif name == "pop":
                answers.append(await session.pop_item())
            else:
                answers.append(await session.clear_session())
        answers.append(await session.get_items())
        return answers

    sqlite = SQLiteSession("s1")
    try:
        expected = asyncio.run(run(sqlite))
    finally:
        sqlite.close()
    ours = session_of(mem_store)
    asyncio.run(ours.clear_session())
    assert asyncio.run(run(ours)) == expected


async def test_a_negative_limit_gives_no_items_and_a_non_integer_limit_is_refused(mem_store: Store) -> None:
    session = session_of(mem_store)
    await session.add_items([{"role": "user", "content": "1"}, {"role": "user", "content": "2"}])
    assert await session.get_items(limit=-1) == []  # as the SDK's Redis, MongoDB and Dapr sessions
    for wrong in ("2", 1.5, True):
        with pytest.raises(InvalidLimitError):
            await session.get_items(limit=cast(Any, wrong))


# -- lossless items, their order, readable records ------------------------------------------------

VARIED_ITEMS: list[Item] = [
    {"role": "user", "content": "plain"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look at this"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
            {"type": "input_file", "file_id": "file-1", "filename": "notes.pdf"},
        ],
    },
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "id": "fc",
    },
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "Sunny"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA" * 40},
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "c2",
        "action": {"type": "click", "x": 10, "y": 20, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "c2",
        "output": {"type": "computer_screenshot", "image_url": "x"},
    },
    {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin Patch"},
    {"type": "custom_tool_call_output", "call_id": "c3", "output": "done"},
    {"type": "item_reference", "id": "msg_123"},
    {"role": "assistant", "content": "lone \ud800 surrogate, nul \x00, float 0.1, big 12345678901234567890"},
    {"type": "message", "role": "assistant", "content": [], "extra": {"nested": [None, True, 1.5e300, {}]}},
]


async def test_every_kind_of_item_comes_back_equal_and_its_json_unchanged(store: Store) -> None:
    session = session_of(store, embedder=open_embedder("hash"))
    await session.add_items(cast(list[TResponseInputItem], VARIED_ITEMS))
    assert plain(await session.get_items()) == VARIED_ITEMS
    records = await store.alist(session.scope.exact())
    assert [r.metadata[ITEM_KEY] for r in records] == [json.dumps(item) for item in VARIED_ITEMS]
    assert [r.message.role for r in records] == [
        "user",
        "user",
        "developer",
        "assistant",
        "tool",
        "assistant",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "assistant",
        "assistant",
    ]
    assert records[1].message.content == "look at this notes.pdf"
    assert records[3].message.tool_calls is not None
    assert records[3].message.tool_calls[0].function.name == "get_weather"
    assert records[4].message.tool_call_id == "c1" and records[4].message.content == "Sunny"
    assert records[5].message.content == "[reasoning]"  # the encrypted payload is not text
    assert [r.metadata[TYPE_KEY] for r in records[:4]] == ["message", "message", "message", "function_call"]


def _stamped_an_hour_ahead(session: MemcoreSession) -> MemoryRecord:
    """An item of ``session`` (content ``"ahead"``) as a process whose clock runs an hour ahead writes it."""
    return MemoryRecord(
        scope=session.scope,
        message=Message(role="user", content="from a process whose clock runs an hour ahead"),
        kind=ITEM_KIND,
        metadata={ITEM_KEY: json.dumps({"role": "user", "content": "ahead"})},
        created_at=utc_now() + timedelta(hours=1),
    )


async def test_new_items_follow_the_latest_even_when_it_was_stamped_ahead_of_this_clock(store: Store) -> None:
    session = session_of(store)
    await store.aadd([_stamped_an_hour_ahead(session)])
    await session.add_items([{"role": "user", "content": "now 1"}, {"role": "user", "content": "now 2"}])
    assert [i["content"] for i in await session.get_items()] == ["ahead", "now 1", "now 2"]


async def test_items_live_as_long_as_the_ttl(mem_store: Store) -> None:
    clock = ManualClock()
    mem_store.clock = clock
    session = session_of(mem_store, ttl=60)
    await session.add_items([{"role": "user", "content": "short-lived"}])
    clock.advance(59)
    assert len(await session.get_items()) == 1
    clock.advance(2)
    assert await session.get_items() == [] and await session.pop_item() is None


# -- typed errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "just a string",
        ["a", "list"],
        {"role": "user", "content": object()},
        {"role": "user", "content": math.nan},
        {"role": "user", 1: "non-string key"},
        {"role": "user", "content": ("a", "tuple")},
    ],
    ids=["string", "list", "object", "nan", "int-key", "tuple"],
)
async def test_an_item_that_is_not_exact_json_is_refused_and_nothing_is_written(
    mem_store: Store, bad: Any
) -> None:
    session = session_of(mem_store)
    with pytest.raises(InvalidInputError):
        await session.add_items([{"role": "user", "content": "fine"}, bad])
    assert await session.get_items() == []


async def test_an_oversized_item_is_refused_with_a_typed_error_and_nothing_is_written(
    mem_store: Store,
) -> None:
    session = session_of(mem_store)
    with pytest.raises(RecordTooLargeError, match="item 1"):
        await session.add_items(
            [{"role": "user", "content": "fine"}, {"role": "user", "content": "x" * 1_100_000}]
        )
    with pytest.raises(InvalidInputError):
        await session.add_items(cast(Any, {"role": "user", "content": "not in a list"}))
    assert await session.get_items() == []
    await session.add_items([{"role": "user", "content": "y" * 400_000}])  # large but within the limit
    assert len((await session.get_items())[0]["content"]) == 400_000


@pytest.mark.parametrize("session_id", ["", "a/b", "..", "x" * 129, "über"])
def test_a_session_id_that_is_not_a_scope_value_is_refused(mem_store: Store, session_id: str) -> None:
    with pytest.raises(ScopeError):
        session_of(mem_store, session_id)


def test_wrong_options_are_refused_with_typed_errors(mem_store: Store) -> None:
    with pytest.raises(InvalidInputError):
        session_of(mem_store, policy=cast(Any, {"limit": 3}))
    with pytest.raises(InvalidInputError):
        session_of(mem_store, recall_role=cast(Any, "tool"))
    with pytest.raises(InvalidInputError):
        session_of(mem_store, ttl=-5)


def test_the_owner_scope_may_not_name_another_session(mem_store: Store) -> None:
    with pytest.raises(ScopeError):
        session_of(mem_store, "s1", Scope(tenant="acme", user_id="alice", session_id="s2"))
    with pytest.raises(ScopeError):
        session_of(mem_store, "s1", Scope.everything())
    same = session_of(mem_store, "s1", Scope(tenant="acme", user_id="alice", session_id="s1"))
    assert same.scope == Scope(tenant="acme", user_id="alice", session_id="s1")


# -- scope: unreadable records, concurrent pops ------------------------------------------------------


async def test_an_unreadable_record_of_the_session_is_skipped_by_reads_and_dropped_by_pop(
    mem_store: Store,
) -> None:
    session = session_of(mem_store)
    await session.add_items([{"role": "user", "content": "good"}])
    broken = [
        MemoryRecord(
            scope=session.scope, message=Message(role="user", content="x"), kind=ITEM_KIND, metadata=meta
        )
        for meta in ({ITEM_KEY: "{not json"}, {ITEM_KEY: "[1, 2]"}, {}, {ITEM_KEY: 3})
    ]
    await mem_store.aadd(broken)
    assert plain(await session.get_items()) == [{"role": "user", "content": "good"}]
    assert plain(await session.get_items(limit=1)) == [{"role": "user", "content": "good"}]
    assert await session.pop_item() == {"role": "user", "content": "good"}
    assert await mem_store.acount(session.scope.exact()) == 0


async def test_concurrent_pops_hand_out_each_item_once(store: Store) -> None:
    session = session_of(store)
    await session.add_items([{"role": "user", "content": str(i)} for i in range(8)])
    popped = await asyncio.gather(*(session.pop_item() for _ in range(10)))
    contents = [cast(Item, p)["content"] for p in popped if p is not None]
    assert sorted(contents) == [str(i) for i in range(8)] and popped.count(None) == 2


# -- recall, paired with the history when asked ---------------------------------------------------------


async def test_recall_reads_only_the_policys_reach_and_never_another_user(mem_store: Store) -> None:
    from memcore.agent.policy import MemoryPolicy

    embedder = open_embedder("hash")
    await remember_elsewhere(mem_store, embedder)
    narrow = session_of(mem_store, "new", embedder=embedder, policy=MemoryPolicy(reach="session"))
    assert await narrow.recall("cat") == []
    wide = session_of(mem_store, "new", embedder=embedder, policy=MemoryPolicy(reach="tenant", limit=10))
    contents = [r.message.content for r in await wide.recall("cat called")]
    assert "My cat is called Mochi." in contents and "My cat is called Rex." in contents
    user = session_of(mem_store, "new", embedder=embedder, policy=MemoryPolicy(reach="user", limit=10))
    assert "My cat is called Rex." not in [r.message.content for r in await user.recall("cat called")]
    with pytest.raises(InvalidInputError):
        await wide.recall("  ")


async def test_a_longterm_memory_on_the_agent_recalls_the_sessions_items(mem_store: Store) -> None:
    embedder = open_embedder("hash")
    await session_of(mem_store, "s1", embedder=embedder).add_items(
        [{"role": "user", "content": "I am vegetarian."}]
    )
    memory = LongtermMemory(mem_store, embedder, OWNER.model_copy(update={"session_id": "s2"}))
    hits = await memory.aretrieve("vegetarian meal")
    assert [hit.record.message.content for hit in hits] == ["I am vegetarian."]


def test_readable_message_maps_item_types_to_roles() -> None:
    assert readable_message({"role": "system", "content": "rules"}).role == "system"
    assert readable_message({"type": "function_call", "name": "f", "arguments": "{}"}).role == "assistant"
    assert (
        readable_message({"type": "shell_call_output", "call_id": "x", "output": []}).content
        == "[shell_call_output]"
    )
    assert readable_message({"type": "mcp_call", "name": "search", "arguments": "{}"}).content == "search {}"


async def test_concurrent_adds_after_an_item_stamped_ahead_never_tie(mem_store: Store) -> None:
    session = session_of(mem_store)
    await mem_store.aadd([_stamped_an_hour_ahead(session)])
    await asyncio.gather(*(session.add_items([{"role": "user", "content": str(i)}]) for i in range(10)))
    records = await mem_store.alist(session.scope.exact())
    assert len({record.created_at for record in records}) == 11
    contents = [i["content"] for i in await session.get_items()]
    assert contents[0] == "ahead" and sorted(contents[1:]) == [str(i) for i in range(10)]
