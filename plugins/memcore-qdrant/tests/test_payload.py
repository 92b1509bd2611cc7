"""A point's payload holds its record: read back exactly, and refused when memcore did not write it."""

from __future__ import annotations

import pytest
from memcore_qdrant.payload import RECORD, from_payload, to_payload

from memcore.errors import StoreCorruptedError
from memcore.records import MemoryRecord, Message
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
