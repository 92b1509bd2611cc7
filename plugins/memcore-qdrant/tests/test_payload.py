"""A point's payload holds its record: read back exactly, and refused when memcore did not write it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from memcore_qdrant.payload import RECORD, from_payload, records_from, to_payload

from memcore.errors import StoreCorruptedError
from memcore.records import FunctionCall, MemoryRecord, Message, ToolCall
from memcore.scope import Scope


def test_a_record_round_trips_through_its_payload() -> None:
    record = MemoryRecord(
        scope=Scope(tenant="t", user_id="u", session_id="s"),
        message=Message(role="user", content="hello"),
        metadata={"n": 2**62, "tags": ["a", "b"], "ok": True},
    )
    assert from_payload(to_payload(record)) == record


@pytest.mark.parametrize(
    "payload",
    [
        None,
        {},
        {RECORD: 42},
        {RECORD: "not json"},
        {RECORD: '{"id": "not-a-uuid"}'},
        {RECORD: '{"scope": {"tenant": "t"}, "message": {"role": "user", "content": "x"}, "extra": 1}'},
        {RECORD: '{"scope": {"tenant": "t"}, "message": {"role": "wizard", "content": "x"}}'},
    ],
)
def test_a_payload_memcore_did_not_write_is_a_corrupted_store(payload: object) -> None:
    with pytest.raises(StoreCorruptedError):
        from_payload(payload)  # type: ignore[arg-type]


def test_records_decode_in_one_pass_exactly_as_one_by_one() -> None:
    moment = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=5)))
    call = ToolCall(id="c1", function=FunctionCall(name="lookup", arguments='{"q": 1}'))
    records = [
        MemoryRecord(
            scope=Scope(tenant="t", user_id="u", agent_id="a", session_id="s"),
            message=Message(role="assistant", content="Ünïcode \u2028 text", tool_calls=(call,)),
            metadata={"n": -(2**63), "f": 0.5, "ok": False, "tags": ["x"], "s": "v"},
            kind="summary",
            created_at=moment,
            expires_at=moment + timedelta(days=1),
            updated_at=moment,
        ),
        MemoryRecord(scope=Scope(tenant="t"), message=Message(role="tool", content="{}", tool_call_id="c1")),
    ]
    payloads = [to_payload(record) for record in records]
    decoded = records_from(payloads)
    assert decoded == records == [MemoryRecord.from_stored_json(p[RECORD]) for p in payloads]
    assert all(
        r.created_at.tzinfo is UTC and (r.expires_at is None or r.expires_at.tzinfo is UTC) for r in decoded
    )
    assert records_from([]) == []


def test_one_forged_payload_among_good_ones_is_a_corrupted_store() -> None:
    good = to_payload(MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="hi")))
    forged = {RECORD: good[RECORD].replace('"user"', '"wizard"')}
    with pytest.raises(StoreCorruptedError):
        records_from([good, forged])
    with pytest.raises(StoreCorruptedError):
        records_from([good, {RECORD: good[RECORD] + ',"score":1}, {"record": 1'}])
