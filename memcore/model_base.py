"""A pydantic base class whose validation errors are memcore errors.

Pydantic raises its own ``ValidationError``; callers of memcore should only ever
have to catch :class:`memcore.errors.MemcoreError`. When a field validator raised
a memcore error (say :class:`~memcore.errors.ScopeError`), that type is kept;
anything else becomes the model's ``invalid_error``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, Self

import pydantic

from memcore.errors import InvalidInputError, InvalidRecordError, MemcoreError

STORED: Final[Mapping[str, bool]] = {"memcore_stored": True}
"""Validation context for data a store reads back from what it wrote itself.

Its values were checked on the way in, so the value checks that cost most on every
read (scope values against their pattern, metadata keys and ranges, record kinds) are
skipped; pydantic still checks the shape (types, required fields, no extras), so a
payload memcore did not write is still refused. Used by the plugins that keep each
record's JSON in their engine (Qdrant, Chroma), where decoding a record is on every read's
path; the ``jsonl`` store still validates fully when it reopens, once per open, as its file
is plain text a person may edit.
"""


def is_stored(info: pydantic.ValidationInfo) -> bool:
    """Whether a validator runs on data a store wrote itself (validated with :data:`STORED`)."""
    return info.context is STORED


def translate_error(
    exc: pydantic.ValidationError, default: type[InvalidInputError] = InvalidRecordError
) -> MemcoreError:
    """The memcore error for a pydantic validation error: the one a validator raised, else ``default``."""
    for detail in exc.errors():
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, MemcoreError):
            return type(cause)(f"{exc.title}: {cause}")
    return default(str(exc))


class MemcoreModel(pydantic.BaseModel):
    """Frozen, strict-about-extras pydantic model raising memcore errors."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    invalid_error: ClassVar[type[InvalidInputError]] = InvalidRecordError

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:
            raise translate_error(exc, self.invalid_error) from None

    # Tells pydantic this __init__ adds nothing to validation, so that nested
    # models (a record's scope, message, tool calls) are validated in pydantic-core
    # directly rather than each through this Python method; direct construction still
    # comes here. Without the marker (a future pydantic), it is only slower.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, **kwargs)
        except pydantic.ValidationError as exc:
            raise translate_error(exc, cls.invalid_error) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Self:
        try:
            return super().model_validate_json(json_data, **kwargs)
        except pydantic.ValidationError as exc:
            raise translate_error(exc, cls.invalid_error) from None
