"""Decoding the records a store wrote itself: shape checked, no-op validators left out.

A store reads back JSON that :class:`~memcore.records.MemoryRecord` produced and checked
on the way in. Validated with :data:`~memcore.model_base.STORED`, five of the models'
validators then return their input unchanged; calling each of them for every record
read costs about a third of a decode. The schema here is the record's own with those
five taken out: every shape check stays (types, required fields, no extra fields, the
role names), and so does every validator that changes a value (times to UTC). A record
a store did not write still fails, as :class:`~memcore.errors.InvalidRecordError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pydantic
import pydantic_core
from pydantic_core import core_schema

from memcore.model_base import STORED, translate_error
from memcore.records import MemoryRecord

SKIPPED_ON_STORED_DATA: Final = frozenset(
    {
        "MemoryRecord._check_scope",
        "MemoryRecord._check_metadata",
        "MemoryRecord._check_kind",
        "Scope._check_values",
        "Message._check_tool_fields",
    }
)
"""The validators of memcore's record models that return their input unchanged on data a store
wrote. A validator added to the models later is not here, so it keeps running."""


def _without_skipped(schema: Any) -> Any:
    """A copy of a pydantic-core schema without the :data:`SKIPPED_ON_STORED_DATA` validators."""
    if isinstance(schema, dict):
        function = schema.get("function")
        if (
            schema.get("type") == "function-after"
            and isinstance(function, dict)
            and getattr(function.get("function"), "__qualname__", None) in SKIPPED_ON_STORED_DATA
        ):
            return _without_skipped(schema["schema"])
        return {key: _without_skipped(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_without_skipped(item) for item in schema]
    return schema


_SCHEMA: Final = _without_skipped(MemoryRecord.__pydantic_core_schema__)
_ONE: Final = pydantic_core.SchemaValidator(_SCHEMA)
_MANY: Final = pydantic_core.SchemaValidator(core_schema.list_schema(core_schema.json_schema(_SCHEMA)))


def decode_stored(data: str | bytes) -> MemoryRecord:
    """The record of ``data``, JSON a store wrote.

    :raises InvalidRecordError: if ``data`` is not a record's JSON.
    """
    try:
        record: MemoryRecord = _ONE.validate_json(data, context=STORED)
    except pydantic.ValidationError as exc:
        raise translate_error(exc) from None
    return record


def decode_stored_many(texts: Sequence[str | bytes]) -> list[MemoryRecord]:
    """The records of ``texts``, in order, in one call into pydantic-core. Each text is parsed on
    its own (never joined into one document, which a forged text could reshape).

    :raises InvalidRecordError: if one of them is not a record's JSON.
    """
    try:
        records: list[MemoryRecord] = _MANY.validate_python(list(texts), context=STORED)
    except pydantic.ValidationError as exc:
        raise translate_error(exc) from None
    return records
