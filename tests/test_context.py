"""Context creators keep the budget exactly, and token counters behave as promised."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memcore
from memcore.agent.context import ChronologicalContextCreator, ContextCreator, ScoreBasedContextCreator
from memcore.agent.tokens import HeuristicTokenCounter, TokenCounter
from memcore.errors import ContextBudgetError, InvalidInputError
from memcore.records import ContextRecord, FunctionCall, MemoryRecord, Message, Role, ToolCall
from memcore.scope import Scope

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SCOPE = Scope(user_id="u1")
CREATORS = [ChronologicalContextCreator, ScoreBasedContextCreator]
Creator = type[ChronologicalContextCreator] | type[ScoreBasedContextCreator]


class PerMessageCounter:
    """One token per message, nothing per prompt: limits read as message counts."""

    def count(self, messages: Sequence[Message]) -> int:
        return len(messages)


class PenaltyCounter:
    """Not additive: a prompt of more than three messages costs 40 extra tokens."""

    def count(self, messages: Sequence[Message]) -> int:
        return sum(len(message.content) for message in messages) + (40 if len(messages) > 3 else 0)


class SquareRootCounter:
    """Sub-additive: a prompt costs less than the sum of its messages."""

    def count(self, messages: Sequence[Message]) -> int:
        return math.isqrt(sum(len(message.content) for message in messages))


def record(role: Role, content: str, minute: int, **fields: Any) -> MemoryRecord:
    return MemoryRecord(
        scope=SCOPE,
        message=Message(role=role, content=content, **fields),
        created_at=T0 + timedelta(minutes=minute),
    )


def context(
    memory_record: MemoryRecord, score: float = 0.0, source: Literal["history", "recall"] = "history"
) -> ContextRecord:
    return ContextRecord(record=memory_record, score=score, source=source)


def calls(*ids: str) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(id=call_id, function=FunctionCall(name="lookup", arguments='{"q": 1}')) for call_id in ids
    )


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [message["content"] for message in messages]


# --- Random conversations -----------------------------------------------------------------------------

WORDS = ["the", "cat", "is", "called", "Mochi", ",", "internationalization", "日本語", "42", "?", "ok"]


@st.composite
def conversations(draw: st.DrawFn) -> list[ContextRecord]:
    """Turns, tool-call units (some results missing, some late), orphans, system messages and duplicates."""
    records: list[ContextRecord] = []
    serial = 0

    def add(role: Role, **fields: Any) -> None:
        nonlocal serial
        serial += 1
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=12)))
        memory_record = record(role, f"m{serial} {text}", draw(st.integers(0, 500)), **fields)
        score = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
        records.append(context(memory_record, score, draw(st.sampled_from(["history", "recall"]))))

    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "system", "developer", "tools", "orphan"]))
        if kind == "tools":
            call_ids = [f"c{serial}-{i}" for i in range(draw(st.integers(1, 3)))]
            add("assistant", tool_calls=calls(*call_ids))
            for call_id in draw(st.lists(st.sampled_from(call_ids), max_size=4)):
                add("tool", tool_call_id=call_id)
        elif kind == "orphan":
            add("tool", tool_call_id="nowhere")
        else:
            add(kind)
    for index, source in draw(
        st.lists(st.tuples(st.integers(0, 100), st.sampled_from(["history", "recall"])))
    ):
        if records:
            duplicate = context(records[index % len(records)].record, 0.5, source)
            records.insert(draw(st.integers(0, len(records))), duplicate)
    return records


def expected_order(records: Sequence[ContextRecord]) -> list[ContextRecord]:
    """One record per id, at its first history position if any, else at its first position."""
    chosen: dict[UUID, int] = {}
    for index, item in enumerate(records):
        if item.record.id not in chosen or (
            item.source == "history" and records[chosen[item.record.id]].source == "recall"
        ):
            chosen[item.record.id] = index
    return [records[index] for index in sorted(chosen.values())]


def check_time_order(output: list[Message], created: dict[str, datetime]) -> None:
    """Units (a message and the tool results after it) come in the order of their oldest member."""
    units: list[list[datetime]] = []
    for message in output:
        if message.role == "tool" and units:
            units[-1].append(created[message.content])
        else:
            units.append([created[message.content]])
    starts = [min(unit) for unit in units]
    assert starts == sorted(starts), "output is not in time order"


def check_tool_units(output: list[Message], deduped: list[Message]) -> None:
    """Every kept result follows its kept call; every kept call keeps the results it had."""
    open_calls: set[str] = set()
    for message in output:
        if message.role == "tool":
            assert message.tool_call_id in open_calls, f"orphan tool result kept: {message.content}"
            open_calls.remove(message.tool_call_id)
        open_calls.update(call.id for call in message.tool_calls or ())
    kept = {message.content for message in output}
    for position, message in enumerate(deduped):
        if message.content not in kept:
            continue
        unanswered = {call.id for call in message.tool_calls or ()}
        for later in deduped[position + 1 :]:
            if later.tool_call_id in unanswered:
                unanswered.remove(later.tool_call_id)
                assert later.content in kept, f"{message.content} kept without its result {later.content}"
        assert not unanswered, f"{message.content} kept with calls nothing answers: {unanswered}"


@pytest.mark.parametrize("creator_class", CREATORS)
@pytest.mark.parametrize("counter", [HeuristicTokenCounter(), PenaltyCounter(), SquareRootCounter()])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=conversations(), slack=st.integers(-10, 300))
def test_budget_holds_for_random_conversations(
    creator_class: Creator, counter: TokenCounter, records: list[ContextRecord], slack: int
) -> None:
    kept_records = expected_order(records)
    deduped = [item.record.message for item in kept_records]
    created = {item.record.message.content: item.record.created_at for item in kept_records}
    pinned = next((message for message in deduped if message.role in ("system", "developer")), None)
    head_tokens = counter.count([pinned] if pinned else [])
    limit = max(1, head_tokens + slack)
    creator = creator_class(counter)
    if head_tokens > limit:
        with pytest.raises(ContextBudgetError):
            creator.create_context(records, limit)
        return

    messages, tokens = creator.create_context(records, limit)

    output = [Message.model_validate(message) for message in messages]
    assert tokens == counter.count(output) <= limit
    texts = contents(messages)
    assert len(set(texts)) == len(texts)
    if pinned is not None:
        assert output[0] == pinned
    check_time_order(output[1:] if pinned is not None else output, created)
    check_tool_units(output, deduped)


# --- Drop order -----------------------------------------------------------------------------------


def test_everything_that_fits_is_kept_in_time_order_with_the_system_message_first() -> None:
    system = context(record("system", "be brief", 0))
    recalled = context(record("user", "my cat is Mochi", 1), 0.9, "recall")
    recent = [context(record("user", "hi", 5)), context(record("assistant", "hello", 6))]

    messages, tokens = ChronologicalContextCreator().create_context([recalled, system, *recent], 10_000)

    assert contents(messages) == ["be brief", "my cat is Mochi", "hi", "hello"]
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert tokens == HeuristicTokenCounter().count([Message.model_validate(m) for m in messages])


def test_chronological_drops_the_oldest_first_whatever_the_input_order() -> None:
    records = [
        context(record("user", "recalled, newest", 9), source="recall"),
        context(record("user", "oldest", 1)),
        context(record("user", "middle", 2)),
        context(record("user", "newer", 3)),
    ]

    messages, tokens = ChronologicalContextCreator(PerMessageCounter()).create_context(records, 2)

    assert contents(messages) == ["newer", "recalled, newest"]
    assert tokens == 2


def test_score_based_drops_the_lowest_score_first_and_the_oldest_among_equals() -> None:
    records = [
        context(record("user", "low", 5), 0.1),
        context(record("user", "high", 1), 0.9),
        context(record("user", "tied, older", 2), 0.5),
        context(record("user", "tied, newer", 3), 0.5),
        context(record("user", "unknown", 4), math.nan),
    ]
    creator = ScoreBasedContextCreator(PerMessageCounter())

    assert contents(creator.create_context(records, 3)[0]) == ["high", "tied, older", "tied, newer"]
    assert contents(creator.create_context(records, 2)[0]) == ["high", "tied, newer"]


def test_the_system_message_is_pinned_however_old_and_low_scored() -> None:
    records = [
        context(record("user", "question", 2), 0.9),
        context(record("system", "rules", 0), 0.0),
        context(record("system", "a later system note", 1), 0.0),
    ]
    for creator in (
        ChronologicalContextCreator(PerMessageCounter()),
        ScoreBasedContextCreator(PerMessageCounter()),
    ):
        assert contents(creator.create_context(records, 2)[0]) == ["rules", "question"]
        assert contents(creator.create_context(records, 3)[0]) == ["rules", "a later system note", "question"]


def test_a_developer_message_is_pinned_too() -> None:
    records = [context(record("user", "old", 0)), context(record("developer", "house rules", 1))]

    messages, _ = ChronologicalContextCreator(PerMessageCounter()).create_context(records, 1)

    assert messages == [{"role": "developer", "content": "house rules"}]


# --- Tool calls -----------------------------------------------------------------------------------


def tool_conversation() -> list[ContextRecord]:
    return [
        context(record("user", "weather?", 1), 0.2),
        context(record("assistant", "calling", 2, tool_calls=calls("a", "b")), 0.1),
        context(record("tool", "sunny", 3, tool_call_id="a"), 0.1),
        context(record("tool", "22C", 4, tool_call_id="b"), 0.9),
        context(record("user", "thanks", 5), 0.5),
    ]


def test_a_tool_call_and_its_results_are_kept_together() -> None:
    messages, _ = ChronologicalContextCreator(PerMessageCounter()).create_context(tool_conversation(), 4)

    assert contents(messages) == ["calling", "sunny", "22C", "thanks"]


def test_a_tool_call_and_its_results_are_dropped_together() -> None:
    messages, tokens = ChronologicalContextCreator(PerMessageCounter()).create_context(tool_conversation(), 3)

    assert contents(messages) == ["thanks"]
    assert tokens == 1


def test_a_tool_call_unit_scores_as_its_best_message() -> None:
    messages, _ = ScoreBasedContextCreator(PerMessageCounter()).create_context(tool_conversation(), 3)

    assert contents(messages) == ["calling", "sunny", "22C"]


def test_an_assistant_call_without_all_its_results_is_dropped() -> None:
    records = [
        context(record("user", "go", 1)),
        context(record("assistant", "calling", 2, tool_calls=calls("x", "y"))),
        context(record("tool", "x done", 3, tool_call_id="x")),
    ]

    messages, _ = ChronologicalContextCreator(PerMessageCounter()).create_context(records, 100)

    assert contents(messages) == ["go"]


def test_orphan_tool_results_are_dropped_whatever_the_budget() -> None:
    records = [
        context(record("tool", "before its call", 1, tool_call_id="a")),
        context(record("tool", "no call at all", 2, tool_call_id="nowhere")),
        context(record("assistant", "calling", 3, tool_calls=calls("a"))),
        context(record("tool", "answer", 4, tool_call_id="a")),
        context(record("tool", "second answer", 5, tool_call_id="a")),
    ]

    messages, tokens = ChronologicalContextCreator(PerMessageCounter()).create_context(records, 100)

    assert contents(messages) == ["calling", "answer"]
    assert tokens == 2


# --- Duplicates -----------------------------------------------------------------------------------


def test_a_record_both_recalled_and_recent_is_kept_once() -> None:
    system = record("system", "rules", 0)
    fact = record("user", "my cat is Mochi", 1)
    records = [
        context(system),
        context(fact, 0.9, "recall"),
        context(record("user", "other hit", 2), 0.8, "recall"),
        context(fact, 0.0, "history"),
        context(record("user", "latest", 3)),
    ]

    messages, _ = ScoreBasedContextCreator().create_context(records, 10_000)

    assert contents(messages) == ["rules", "my cat is Mochi", "other hit", "latest"]


def test_among_recalled_duplicates_the_first_is_kept() -> None:
    fact = record("user", "fact", 1)
    records = [
        context(fact, 0.9, "recall"),
        context(record("user", "x", 2), 0.5),
        context(fact, 0.1, "recall"),
    ]

    messages, _ = ScoreBasedContextCreator(PerMessageCounter()).create_context(records, 1)

    assert contents(messages) == ["fact"]


def test_records_of_one_id_in_two_scopes_are_both_kept() -> None:
    shared = record("user", "alice's note", 1)
    other = shared.model_copy(
        update={
            "scope": SCOPE.model_copy(update={"user_id": "bob"}),
            "message": Message(role="user", content="bob's note"),
        }
    )
    records = [context(shared, 0.9, "recall"), context(other, 0.8, "recall")]

    messages, _ = ScoreBasedContextCreator().create_context(records, 10_000)

    assert contents(messages) == ["alice's note", "bob's note"]


# --- Budget errors and exactness ------------------------------------------------------------------


def test_a_system_message_over_the_budget_says_by_how_much() -> None:
    counter = HeuristicTokenCounter()
    system = record("system", "a long system prompt " * 20, 0)
    cost = counter.count([system.message])

    with pytest.raises(ContextBudgetError, match=f"{cost} tokens, 5 more than token_limit={cost - 5}"):
        ChronologicalContextCreator(counter).create_context([context(system)], cost - 5)
    messages, tokens = ChronologicalContextCreator(counter).create_context([context(system)], cost)
    assert (len(messages), tokens) == (1, cost)


def test_an_empty_prompt_over_the_budget_is_refused() -> None:
    with pytest.raises(ContextBudgetError, match="empty prompt"):
        ChronologicalContextCreator().create_context([context(record("user", "hi", 0))], 2)


@pytest.mark.parametrize("token_limit", [0, -1, True, False, 1.5, "100", None])
def test_the_token_limit_must_be_a_positive_int(token_limit: Any) -> None:
    for creator_class in CREATORS:
        with pytest.raises(ContextBudgetError, match="positive int") as raised:
            creator_class().create_context([context(record("user", "hi", 0))], token_limit)
        assert isinstance(raised.value, InvalidInputError)


def test_a_non_additive_counter_is_respected_exactly() -> None:
    records = [context(record("user", f"msg{i}", i)) for i in range(5)]
    counter = PenaltyCounter()
    # Each message costs 4 alone, so five cost 20 by addition; together they cost 60.
    assert (
        counter.count([records[0].record.message]) * 5
        <= 30
        < counter.count([r.record.message for r in records])
    )

    messages, tokens = ChronologicalContextCreator(counter).create_context(records, 30)

    assert contents(messages) == ["msg2", "msg3", "msg4"]
    assert tokens == 12


@pytest.mark.parametrize(("counter", "expected"), [(HeuristicTokenCounter(), 3), (PerMessageCounter(), 0)])
def test_no_records_give_an_empty_prompt_and_its_count(counter: TokenCounter, expected: int) -> None:
    assert ScoreBasedContextCreator(counter).create_context([], 10) == ([], expected)


# --- Token counters -------------------------------------------------------------------------------


def test_the_heuristic_counter_approximates_bpe() -> None:
    counter = HeuristicTokenCounter()
    hello = Message(role="user", content="hello world")

    assert counter.count([]) == 3
    assert counter.count([hello]) == 3 + 3 + 1 + 2 + 2
    assert counter.count([Message(role="user", content="a, b.")]) == 3 + 3 + 1 + 4
    assert counter.count([Message(role="user", content="internationalization")]) == 3 + 3 + 1 + 5
    assert counter.count([Message(role="user", content="日本語")]) == 3 + 3 + 1 + 3
    assert counter.count([hello.model_copy(update={"name": "alice"})]) == counter.count([hello]) + 1 + 2
    with_call = Message(role="assistant", content="", tool_calls=calls("call1"))
    assert counter.count([with_call]) > counter.count([Message(role="assistant", content="")])


message_strategy = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant"]),
    content=st.text(max_size=40),
    name=st.none() | st.from_regex(r"[a-z]{1,8}", fullmatch=True),
)


@settings(max_examples=100, deadline=None)
@given(messages=st.lists(message_strategy, max_size=6), extra=message_strategy, at=st.integers(0, 6))
def test_the_heuristic_counter_is_monotonic(messages: list[Message], extra: Message, at: int) -> None:
    counter = HeuristicTokenCounter()
    longer = [*messages[:at], extra, *messages[at:]]

    assert counter.count(longer) >= counter.count(messages)
    assert counter.count(longer) == counter.count(list(longer))


def test_the_default_counter_is_the_heuristic_and_everything_meets_its_protocol() -> None:
    creator = ScoreBasedContextCreator()

    assert isinstance(creator.token_counter, HeuristicTokenCounter)
    assert isinstance(HeuristicTokenCounter(), TokenCounter)
    assert isinstance(PenaltyCounter(), TokenCounter)
    assert isinstance(creator, ContextCreator) and isinstance(ChronologicalContextCreator(), ContextCreator)


def test_the_package_exports_the_context_api() -> None:
    assert memcore.ContextCreator is ContextCreator
    assert memcore.ChronologicalContextCreator is ChronologicalContextCreator
    assert memcore.ScoreBasedContextCreator is ScoreBasedContextCreator
    assert memcore.TokenCounter is TokenCounter
    assert memcore.HeuristicTokenCounter is HeuristicTokenCounter
