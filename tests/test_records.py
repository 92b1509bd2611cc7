"""Records, messages and scopes: validation and exact round-trips."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import pickle
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memcore.errors import InvalidRecordError, ScopeError
from memcore.records import FunctionCall, MemoryRecord, Message, ToolCall, utc_now
from memcore.scope import DEFAULT_TENANT, Scope, storage_id
from memcore.validation import check_scope


def _call() -> ToolCall:
    return ToolCall(id="call_1", function=FunctionCall(name="weather", arguments='{"city": "Oslo"}'))


def test_record_round_trips_through_dict_and_json() -> None:
    record = MemoryRecord(
        scope=Scope(tenant="acme", user_id="u-1", agent_id="a@b", session_id="s:1"),
        message=Message(role="assistant", content="", tool_calls=(_call(),)),
        metadata={"n": 2**63 - 1, "x": 0.1, "flag": False, "tags": ["a"], "s": ""},
        kind="turn",
    )
    assert MemoryRecord.model_validate(record.model_dump()) == record
    assert MemoryRecord.model_validate_json(record.model_dump_json()) == record
    assert MemoryRecord.model_validate(json.loads(record.model_dump_json())) == record


def test_metadata_types_are_kept() -> None:
    record = MemoryRecord(
        scope=Scope(tenant="t"),
        message=Message(role="user", content="x"),
        metadata={"i": 1, "f": 1.0, "b": True, "s": "1"},
    )
    restored = MemoryRecord.model_validate_json(record.model_dump_json())
    assert [type(restored.metadata[k]) for k in ("i", "f", "b", "s")] == [int, float, bool, str]


def test_to_openai() -> None:
    assert Message(role="user", content="hi", name="ann").to_openai() == {
        "role": "user",
        "content": "hi",
        "name": "ann",
    }
    assistant = Message(role="assistant", content="", tool_calls=(_call(),)).to_openai()
    assert assistant["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    ]
    assert Message(role="tool", content="12C", tool_call_id="call_1").to_openai() == {
        "role": "tool",
        "content": "12C",
        "tool_call_id": "call_1",
    }


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "robot", "content": "x"},
        {"role": "tool", "content": "x"},
        {"role": "user", "content": "x", "tool_call_id": "c"},
        {"role": "user", "content": "x", "tool_calls": [_call().model_dump()]},
        {"role": "user", "content": None},
        {"role": "user", "content": "x", "extra": 1},
    ],
)
def test_invalid_messages(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidRecordError):
        Message.model_validate(fields)


@pytest.mark.parametrize(
    "metadata",
    [
        {"bad key": 1},
        {"1starts_with_digit": 1},
        {"k" * 65: 1},
        {"nested": {"a": 1}},
        {"n": 2**63},
        {"n": -(2**63) - 1},
        {"f": float("nan")},
        {"f": float("inf")},
        {"l": [1, 2]},
        {"none": None},
    ],
)
def test_invalid_metadata(metadata: dict[str, object]) -> None:
    with pytest.raises(InvalidRecordError):
        MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="x"), metadata=metadata)  # type: ignore[arg-type]


def test_created_at_is_utc_and_must_be_aware() -> None:
    oslo = timezone(timedelta(hours=1))
    record = MemoryRecord(
        scope=Scope(tenant="t"),
        message=Message(role="user", content="x"),
        created_at=datetime(2026, 5, 1, 13, 0, tzinfo=oslo),
    )
    assert record.created_at == datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert record.created_at.tzinfo is UTC
    with pytest.raises(InvalidRecordError):
        MemoryRecord(
            scope=Scope(tenant="t"),
            message=Message(role="user", content="x"),
            created_at=datetime(2026, 1, 1),
        )


def test_default_timestamps_strictly_increase() -> None:
    stamps = [utc_now() for _ in range(10_000)]
    assert all(a < b for a, b in itertools.pairwise(stamps))


def test_invalid_kind() -> None:
    with pytest.raises(InvalidRecordError):
        MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="x"), kind="Not Valid")


def test_scope_matching() -> None:
    record_scope = Scope(tenant="t", user_id="u", session_id="s")
    assert Scope(tenant="t").matches(record_scope)
    assert Scope(tenant="t", user_id="u", session_id="s").matches(record_scope)
    assert not Scope(tenant="t", agent_id="a").matches(record_scope)
    assert not Scope(tenant="other").matches(record_scope)
    assert Scope.everything().matches(record_scope)
    assert Scope.everything().is_everything and not record_scope.is_everything


@pytest.mark.parametrize("value", ["", ".", "..", "...", "a/b", "../etc", "a b", "é", "x" * 129, "a\x00"])
def test_scope_values_are_validated(value: str) -> None:
    with pytest.raises(ScopeError):
        Scope(user_id=value)


def test_empty_scope_is_refused_and_records_need_a_concrete_one() -> None:
    with pytest.raises(ScopeError):
        Scope()
    with pytest.raises(ScopeError):
        MemoryRecord(scope={}, message=Message(role="user", content="x"))  # type: ignore[arg-type]


def test_the_admin_scope_survives_copies_and_pickles_and_an_empty_scope_is_not_it() -> None:
    everything = Scope.everything()
    copies = [copy.copy(everything), copy.deepcopy(everything), pickle.loads(pickle.dumps(everything))]
    assert all(c.is_admin and c.is_everything for c in [everything, *copies, everything.model_copy()])
    empty = Scope.model_construct(tenant=None)
    assert not empty.is_admin and empty != everything
    with pytest.raises(ScopeError):
        check_scope(empty)
    assert check_scope(everything).is_everything
    with pytest.raises(ScopeError):
        MemoryRecord(scope=everything, message=Message(role="user", content="x"))


def test_every_scope_names_a_tenant_and_the_default_tenant_stands_in_for_none() -> None:
    assert Scope(user_id="alice").tenant == DEFAULT_TENANT
    assert Scope(user_id="alice") != Scope(tenant="acme", user_id="alice")
    for fields in ({}, {"tenant": None}, {"tenant": None, "user_id": "alice"}):
        with pytest.raises(ScopeError):
            Scope(**fields)
    with pytest.raises(ScopeError):
        check_scope(Scope.model_construct(tenant=None, user_id="alice"))
    old = MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="x")).model_dump_json()
    stored = MemoryRecord.from_stored_json(old.replace('"tenant":"t"', '"tenant":null'))
    assert stored.scope.tenant is None, "records stored before the rule still read back"


class _LooksLikeU:
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("u")


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the values that are not strings, dumped
def test_a_checked_scope_is_remembered_by_its_values_and_never_lets_a_bad_one_through() -> None:
    good = Scope(tenant="t", user_id="u")
    assert check_scope(good) is check_scope(Scope(tenant="t", user_id="u"))  # validated once
    assert check_scope(good.exact()).is_exact and not check_scope(good).is_exact
    for _ in range(2):  # refused every time, not remembered
        with pytest.raises(ScopeError):
            check_scope(Scope.model_construct(tenant="t", user_id=".."))
        with pytest.raises(ScopeError):
            check_scope(good.model_copy(update={"user_id": "a/b"}))
        with pytest.raises(ScopeError):
            check_scope(Scope.model_construct(tenant="t", user_id=["unhashable"]))
        with pytest.raises(ScopeError):  # equal to, and hashed like, the "u" remembered above
            check_scope(Scope.model_construct(tenant="t", user_id=_LooksLikeU()))


def test_a_scope_digest_is_remembered_only_for_plain_strings() -> None:
    good = Scope(tenant="t", user_id="u")
    expected = hashlib.sha256(b'["t","u",null,null]').hexdigest()[:32]
    assert good.digest() == expected == Scope(tenant="t", user_id="u").digest()  # computed, then remembered
    record_id = uuid.uuid4()
    assert storage_id(good, record_id) == uuid.uuid5(uuid.UUID(expected), str(record_id))
    odd = Scope.model_construct(tenant="t", user_id=_LooksLikeU(), agent_id=None, session_id=None)
    with pytest.raises(TypeError):  # not the remembered digest of "u": it is not JSON at all
        odd.digest()


def test_an_exact_scope_matches_its_own_level_only_and_copies_keep_it() -> None:
    user = Scope(tenant="t", user_id="u")
    exact = user.exact()
    assert exact.as_tuple() == user.as_tuple() and exact.is_exact and not user.is_exact
    copies = [copy.copy(exact), copy.deepcopy(exact), pickle.loads(pickle.dumps(exact)), exact.model_copy()]
    assert all(c.is_exact for c in [*copies, check_scope(exact)])
    assert exact.matches(user) and user.matches(Scope(tenant="t", user_id="u", agent_id="a"))
    assert not exact.matches(Scope(tenant="t", user_id="u", agent_id="a"))
    assert not exact.matches(Scope(tenant="t", user_id="u", session_id="s"))
    assert "exact" in repr(exact) and "exact" in str(exact)
    with pytest.raises(ScopeError):
        Scope.everything().exact()


def test_a_stored_record_is_read_back_without_its_value_checks_but_not_without_its_shape() -> None:
    record = MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="x"), kind="fact")
    assert MemoryRecord.from_stored_json(record.model_dump_json()) == record
    unchecked = record.model_dump_json().replace('"kind":"fact"', '"kind":"NOT A KIND"')
    assert MemoryRecord.from_stored_json(unchecked).kind == "NOT A KIND", "checked when written"
    with pytest.raises(InvalidRecordError):
        MemoryRecord.model_validate_json(unchecked)
    with pytest.raises(InvalidRecordError):
        MemoryRecord.from_stored_json(record.model_dump_json().replace('"role":"user"', '"role":"wizard"'))


def test_scope_digest_is_stable_and_distinct() -> None:
    assert Scope(tenant="t", user_id="u").digest() == Scope(user_id="u", tenant="t").digest()
    assert Scope(tenant="t", user_id="u").digest() != Scope(tenant="t", agent_id="u").digest()
    # Folder names on disk depend on this exact encoding: changing it orphans stored data.
    assert Scope(tenant="t").digest() == hashlib.sha256(b'["t",null,null,null]').hexdigest()[:32]
