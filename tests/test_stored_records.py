"""Records read back from a store's own JSON: the same records, faster, and still shape-checked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memcore.errors import InvalidRecordError
from memcore.records import FunctionCall, MemoryRecord, Message, ToolCall
from memcore.scope import Scope
from memcore.stored_records import SKIPPED_ON_STORED_DATA, decode_stored, decode_stored_many


def _validator_names(schema: object) -> set[str]:
    if isinstance(schema, dict):
        kind = schema.get("type")
        validator = isinstance(kind, str) and kind.startswith("function-")
        own = {schema["function"]["function"].__qualname__} if validator else set()
        return own.union(*(_validator_names(value) for value in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_validator_names(item) for item in schema))
    return set()


def test_only_validators_that_do_nothing_on_stored_data_are_left_out() -> None:
    """A renamed one would run again (slower, still right); a new one runs: this test says so."""
    everything = _validator_names(MemoryRecord.__pydantic_core_schema__)
    assert everything >= SKIPPED_ON_STORED_DATA
    assert everything - SKIPPED_ON_STORED_DATA == {"MemoryRecord._to_utc", "MemoryRecord._optional_to_utc"}


def test_stored_records_decode_to_the_records_written() -> None:
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
    texts = [record.model_dump_json() for record in records]
    assert decode_stored_many(texts) == records == [decode_stored(text.encode()) for text in texts]
    assert all(record.created_at.tzinfo is UTC for record in decode_stored_many(texts))
    assert MemoryRecord.from_stored_json(texts[0]) == records[0]


def test_json_no_store_wrote_is_refused() -> None:
    good = MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="hi")).model_dump_json()
    for forged in (good.replace('"user"', '"wizard"'), good[:-1] + ',"score":1}', good[:-1], "[]"):
        with pytest.raises(InvalidRecordError):
            decode_stored(forged)
        with pytest.raises(InvalidRecordError):
            decode_stored_many([good, forged])
