"""The OpenAI Agents SDK session: the SDK's Runner on its own scripted model (``agents.testing``), the
SDK's own session tests run side by side with its SQLiteSession, and memcore's scoping, erasure and
recall on top."""

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
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.items import TResponseInputItem, TResponseOutputItem
from agents.memory import Session, SessionABC, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore import open_embedder, open_store
from memcore.agent.memories import LongtermMemory
from memcore.errors import InvalidInputError, InvalidLimitError, RecordTooLargeError, ScopeError
from memcore.integrations.openai_agents import (
    ITEM_KEY,
    ITEM_KIND,
    OWNER_KEY,
    TYPE_KEY,
    MemcoreSession,
    readable_message,
)
from memcore.records import MemoryRecord, Message, utc_now
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing import ManualClock

OWNER = Scope(tenant="acme", user_id="alice", agent_id="travel")
Item = dict[str, Any]


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


# -- the SDK's own scripted model (agents.testing), its inputs as plain JSON ---------------------------


def scripted(*turns: list[TResponseOutputItem]) -> ScriptedModel:
    return ScriptedModel(list(turns))


def inputs(model: ScriptedModel) -> list[list[Item]]:
    """What the model was given at each call, as JSON values."""
    given = [
        [{"role": "user", "content": c.input}] if isinstance(c.input, str) else c.input for c in model.calls
    ]
    return cast(list[list[Item]], json.loads(json.dumps(given)))


async def run(method: str, agent: Agent[Any], turn_input: Any, **options: Any) -> Any:
    """The final output of ``Runner.run`` or of ``Runner.run_streamed``, its events consumed."""
    if method == "run":
        return (await Runner.run(agent, turn_input, **options)).final_output
    streamed = Runner.run_streamed(agent, turn_input, **options)
    async for _ in streamed.stream_events():
        pass
    return streamed.final_output


def say(text: str) -> TResponseOutputItem:
    return assistant_message(text, item_id="msg_1")


def call(name: str, arguments: str, call_id: str = "call_1") -> TResponseOutputItem:
    return function_call(name, arguments, call_id=call_id, item_id="fc_1")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def _session(store: Store, session_id: str = "s1", scope: Scope = OWNER, **options: Any) -> MemcoreSession:
    return MemcoreSession(session_id, store, scope, **options)


def _plain(items: list[TResponseInputItem]) -> list[Item]:
    return [dict(item) for item in items]


# -- the Session protocol --------------------------------------------------------------------------


def test_it_is_an_sdk_session_with_the_protocols_signatures(mem_store: Store) -> None:
    session: Session = _session(mem_store)  # mypy checks the protocol structurally
    assert isinstance(session, Session)
    for name in ("get_items", "add_items", "pop_item", "clear_session"):
        ours, theirs = getattr(MemcoreSession, name), getattr(SessionABC, name)
        assert inspect.iscoroutinefunction(ours)
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters)
    assert session.session_id == "s1" and session.session_settings == SessionSettings()


@pytest.mark.parametrize("method", ["run", "run_streamed"])
async def test_runner_two_turns_the_second_sees_the_first_with_its_tool_round_trip(
    store: Store, method: str
) -> None:
    session = _session(store)
    model = scripted(
        [call("get_weather", '{"city": "Paris"}')],
        [say("It is sunny in Paris.")],
        [say("You asked about Paris.")],
    )
    agent = Agent(name="travel", model=model, tools=[get_weather])

    assert await run(method, agent, "Weather in Paris?", session=session) == "It is sunny in Paris."
    first_turn = _plain(await session.get_items())
    assert [(item.get("type"), item.get("role")) for item in first_turn] == [
        (None, "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
    ]
    assert first_turn[1]["arguments"] == '{"city": "Paris"}' and first_turn[1]["call_id"] == "call_1"
    assert first_turn[2] == {"call_id": "call_1", "output": "Sunny in Paris", "type": "function_call_output"}
    assert inputs(model)[1] == first_turn[:3]  # the tool's output went back to the model

    assert await run(method, agent, "What did I ask?", session=session) == "You asked about Paris."
    assert inputs(model)[2] == [*first_turn, {"role": "user", "content": "What did I ask?"}]
    stored = _plain(await session.get_items())
    assert stored[:-1] == inputs(model)[2]
    assert stored[-1]["content"][0]["text"] == "You asked about Paris."
    tool_records = await store.alist(session.scope.exact(), filter={"role": "tool"})
    assert [r.message.tool_call_id for r in tool_records] == ["call_1"]
    assert [r.message.content for r in tool_records] == ["Sunny in Paris"]


def test_run_sync_keeps_the_history_across_two_turns(mem_store: Store) -> None:
    session = _session(mem_store)
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
        await Runner.run(agent, "Weather in Oslo?", session=_session(store))
        written = _plain(await _session(store).get_items())
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
            return _session(mem_store, session_id, **options)
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
        assert await run(method, agent, turn_input, session=session, run_config=config) == reply
    return inputs(model), _plain(await session.get_items())


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
    assert await _run_turns(_session(mem_store), RUNNER_SCENARIOS[scenario], method) == expected


async def test_sdk_different_sessions_keep_separate_histories(mem_store: Store) -> None:
    one, two = _session(mem_store, "session_1"), _session(mem_store, "session_2")
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
    ours = _session(mem_store)
    asyncio.run(ours.clear_session())
    assert asyncio.run(run(ours)) == expected


async def test_a_negative_limit_gives_no_items_and_a_non_integer_limit_is_refused(mem_store: Store) -> None:
    session = _session(mem_store)
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
    session = _session(store, embedder=open_embedder("hash"))
    await session.add_items(cast(list[TResponseInputItem], VARIED_ITEMS))
    assert _plain(await session.get_items()) == VARIED_ITEMS
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


async def test_fifty_items_in_one_call_keep_their_order_and_pop_goes_newest_first(store: Store) -> None:
    session = _session(store)
    items = [{"role": "user", "content": f"item {i:02d}"} for i in range(50)]
    await session.add_items(cast(list[TResponseInputItem], items))
    await session.add_items([{"role": "user", "content": "item 50"}])
    assert [i["content"] for i in await session.get_items()] == [f"item {i:02d}" for i in range(51)]
    assert [i["content"] for i in await session.get_items(limit=3)] == ["item 48", "item 49", "item 50"]
    popped = [await session.pop_item() for _ in range(3)]
    assert [cast(Item, p)["content"] for p in popped] == ["item 50", "item 49", "item 48"]


async def test_new_items_follow_the_latest_even_when_it_was_stamped_ahead_of_this_clock(store: Store) -> None:
    session = _session(store)
    ahead = MemoryRecord(
        scope=session.scope,
        message=Message(role="user", content="from a process whose clock runs an hour ahead"),
        kind=ITEM_KIND,
        metadata={ITEM_KEY: json.dumps({"role": "user", "content": "ahead"})},
        created_at=utc_now() + timedelta(hours=1),
    )
    await store.aadd([ahead])
    await session.add_items([{"role": "user", "content": "now 1"}, {"role": "user", "content": "now 2"}])
    assert [i["content"] for i in await session.get_items()] == ["ahead", "now 1", "now 2"]


async def test_pop_deletes_the_record_from_every_read_path(store: Store) -> None:
    embedder = open_embedder("hash")
    session = _session(store, embedder=embedder)
    await session.add_items(
        [{"role": "user", "content": "keep me"}, {"role": "user", "content": "my PIN is 4321"}]
    )
    [record] = await store.alist(
        session.scope.exact(), filter={"metadata.oa_item": {"$exists": True}}, order="desc", limit=1
    )
    assert await session.pop_item() == {"role": "user", "content": "my PIN is 4321"}
    assert await store.aget(session.scope, [record.id]) == []
    assert await store.asearch(session.scope, text="4321") == []
    assert await store.asearch(session.scope, keywords="PIN 4321") == []
    hits = await store.asearch(session.scope, vector=embedder.embed(["my PIN is 4321"])[0], limit=10)
    assert [hit.record.message.content for hit in hits] == ["keep me"]


async def test_items_live_as_long_as_the_ttl(mem_store: Store) -> None:
    clock = ManualClock()
    mem_store.clock = clock
    session = _session(mem_store, ttl=60)
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
    session = _session(mem_store)
    with pytest.raises(InvalidInputError):
        await session.add_items([{"role": "user", "content": "fine"}, bad])
    assert await session.get_items() == []


async def test_an_oversized_item_is_refused_with_a_typed_error_and_nothing_is_written(
    mem_store: Store,
) -> None:
    session = _session(mem_store)
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
        _session(mem_store, session_id)


def test_wrong_options_are_refused_with_typed_errors(mem_store: Store) -> None:
    with pytest.raises(InvalidInputError):
        _session(mem_store, policy=cast(Any, {"limit": 3}))
    with pytest.raises(InvalidInputError):
        _session(mem_store, recall_role=cast(Any, "tool"))
    with pytest.raises(InvalidInputError):
        _session(mem_store, ttl=-5)


def test_the_owner_scope_may_not_name_another_session(mem_store: Store) -> None:
    with pytest.raises(ScopeError):
        _session(mem_store, "s1", Scope(tenant="acme", user_id="alice", session_id="s2"))
    with pytest.raises(ScopeError):
        _session(mem_store, "s1", Scope.everything())
    same = _session(mem_store, "s1", Scope(tenant="acme", user_id="alice", session_id="s1"))
    assert same.scope == Scope(tenant="acme", user_id="alice", session_id="s1")


# -- scope: other sessions, agents and users, also dressed as this session's items -------------------

ALICE = Scope(tenant="acme", user_id="alice")
NEIGHBOURS = [
    Scope(tenant="acme"),
    ALICE,
    OWNER,
    Scope(tenant="acme", user_id="alice", agent_id="travel", session_id="s2"),
    Scope(tenant="acme", user_id="alice", agent_id="coder", session_id="s1"),
    Scope(tenant="acme", user_id="alice", session_id="s1"),
    Scope(tenant="acme", user_id="bob", agent_id="travel", session_id="s1"),
    Scope(tenant="other", user_id="alice", agent_id="travel", session_id="s1"),
]


def _forged(scope: Scope, digest: str, text: str) -> MemoryRecord:
    """A record of another scope carrying this session's kind, owner digest and a well-formed item."""
    item = json.dumps({"role": "user", "content": text})
    metadata = {ITEM_KEY: item, TYPE_KEY: "message", OWNER_KEY: digest}
    return MemoryRecord(
        scope=scope, message=Message(role="user", content=text), kind=ITEM_KIND, metadata=metadata
    )


async def test_records_of_every_other_scope_are_never_returned_popped_or_cleared(store: Store) -> None:
    session = _session(store)
    planted = [_forged(scope, session.scope.digest(), f"forged in {scope}") for scope in NEIGHBOURS]
    turn = MemoryRecord(scope=session.scope, message=Message(role="user", content="an agent memory's turn"))
    await store.aadd([*planted, turn])
    await _session(store, "s2").add_items([{"role": "user", "content": "sibling session"}])
    everything = Scope(tenant="acme")

    assert await session.get_items() == [] and await session.pop_item() is None
    await session.add_items([{"role": "user", "content": "mine"}])
    assert _plain(await session.get_items()) == [{"role": "user", "content": "mine"}]
    assert _plain(await session.get_items(limit=5)) == [{"role": "user", "content": "mine"}]
    before = {(r.scope, r.id) for r in await store.alist(everything)} | {
        (r.scope, r.id) for r in await store.alist(Scope(tenant="other"))
    }
    assert await session.pop_item() == {"role": "user", "content": "mine"}
    assert await session.pop_item() is None
    await session.add_items([{"role": "user", "content": "mine again"}])
    await session.clear_session()
    after = {(r.scope, r.id) for r in await store.alist(everything)} | {
        (r.scope, r.id) for r in await store.alist(Scope(tenant="other"))
    }
    assert after == {key for key in before if key[0] != session.scope or key[1] == turn.id}
    assert len(after) == len(planted) + 2  # the forged ones, the sibling session's item, the turn


async def test_an_unreadable_record_of_the_session_is_skipped_by_reads_and_dropped_by_pop(
    mem_store: Store,
) -> None:
    session = _session(mem_store)
    await session.add_items([{"role": "user", "content": "good"}])
    broken = [
        MemoryRecord(
            scope=session.scope, message=Message(role="user", content="x"), kind=ITEM_KIND, metadata=meta
        )
        for meta in ({ITEM_KEY: "{not json"}, {ITEM_KEY: "[1, 2]"}, {}, {ITEM_KEY: 3})
    ]
    await mem_store.aadd(broken)
    assert _plain(await session.get_items()) == [{"role": "user", "content": "good"}]
    assert _plain(await session.get_items(limit=1)) == [{"role": "user", "content": "good"}]
    assert await session.pop_item() == {"role": "user", "content": "good"}
    assert await mem_store.acount(session.scope.exact()) == 0


async def test_concurrent_pops_hand_out_each_item_once(store: Store) -> None:
    session = _session(store)
    await session.add_items([{"role": "user", "content": str(i)} for i in range(8)])
    popped = await asyncio.gather(*(session.pop_item() for _ in range(10)))
    contents = [cast(Item, p)["content"] for p in popped if p is not None]
    assert sorted(contents) == [str(i) for i in range(8)] and popped.count(None) == 2


# -- recall, paired with the history when asked ---------------------------------------------------------


async def _remember_elsewhere(store: Store, embedder: Any) -> None:
    await _session(store, "old", embedder=embedder).add_items(
        [
            {"role": "user", "content": "My cat is called Mochi."},
            {"type": "function_call", "call_id": "c9", "name": "lookup_cat", "arguments": '{"cat": "Mochi"}'},
            {"type": "function_call_output", "call_id": "c9", "output": "cat Mochi: tabby"},
        ]
    )
    bob = Scope(tenant="acme", user_id="bob", agent_id="travel")
    await _session(store, "old", bob, embedder=embedder).add_items(
        [{"role": "user", "content": "My cat is called Rex."}]
    )


@pytest.mark.parametrize("embedded", [True, False], ids=["embedder", "keywords"])
async def test_recall_pairs_other_sessions_memories_with_the_history_and_is_never_stored(
    store: Store, embedded: bool
) -> None:
    embedder = open_embedder("hash") if embedded else None
    await _remember_elsewhere(store, embedder)
    session = _session(store, "new", embedder=embedder)
    model = scripted([say("Noted.")], [say("Mochi.")])
    agent = Agent(name="travel", model=model)
    config = RunConfig(session_input_callback=session.recall_input_callback)
    await Runner.run(agent, "I fly to Oslo on Monday.", session=session, run_config=config)
    await Runner.run(agent, "What is my cat called?", session=session, run_config=config)

    recalled = [i for i in inputs(model)[1] if i.get("role") == "developer"]
    assert len(recalled) == 1
    assert "- (user) My cat is called Mochi." in recalled[0]["content"]
    assert "Rex" not in recalled[0]["content"] and "tabby" not in recalled[0]["content"]
    assert "Oslo" not in recalled[0]["content"]  # the session's own items are the history, not recall
    assert inputs(model)[1][-2:] == [recalled[0], {"role": "user", "content": "What is my cat called?"}]
    stored = _plain(await session.get_items())
    assert [i.get("role") for i in stored] == ["user", "assistant", "user", "assistant"]
    assert await store.acount(session.scope.exact()) == 4 and not session._recalled


async def test_recall_reads_only_the_policys_reach_and_never_another_user(mem_store: Store) -> None:
    from memcore.agent.policy import MemoryPolicy

    embedder = open_embedder("hash")
    await _remember_elsewhere(mem_store, embedder)
    narrow = _session(mem_store, "new", embedder=embedder, policy=MemoryPolicy(reach="session"))
    assert await narrow.recall("cat") == []
    wide = _session(mem_store, "new", embedder=embedder, policy=MemoryPolicy(reach="tenant", limit=10))
    contents = [r.message.content for r in await wide.recall("cat called")]
    assert "My cat is called Mochi." in contents and "My cat is called Rex." in contents
    user = _session(mem_store, "new", embedder=embedder, policy=MemoryPolicy(reach="user", limit=10))
    assert "My cat is called Rex." not in [r.message.content for r in await user.recall("cat called")]
    with pytest.raises(InvalidInputError):
        await wide.recall("  ")


async def test_a_longterm_memory_on_the_agent_recalls_the_sessions_items(mem_store: Store) -> None:
    embedder = open_embedder("hash")
    await _session(mem_store, "s1", embedder=embedder).add_items(
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
    session = _session(mem_store)
    ahead = MemoryRecord(
        scope=session.scope,
        message=Message(role="user", content="ahead"),
        kind=ITEM_KIND,
        metadata={ITEM_KEY: json.dumps({"role": "user", "content": "ahead"})},
        created_at=utc_now() + timedelta(hours=1),
    )
    await mem_store.aadd([ahead])
    await asyncio.gather(*(session.add_items([{"role": "user", "content": str(i)}]) for i in range(10)))
    records = await mem_store.alist(session.scope.exact())
    assert len({record.created_at for record in records}) == 11
    contents = [i["content"] for i in await session.get_items()]
    assert contents[0] == "ahead" and sorted(contents[1:]) == [str(i) for i in range(10)]
