"""The records memcore stores: messages, their owners, and their metadata.

A :class:`MemoryRecord` is one message (a chat turn, a tool result, a summary)
with an id, a :class:`~memcore.scope.Scope`, a UTC timestamp and flat,
filterable metadata. Records round-trip exactly through ``model_dump()`` /
``model_validate()`` and through JSON, the interchange format of every store.
"""

from __future__ import annotations

import math
import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args
from uuid import UUID, uuid4

import pydantic

from memcore.model_base import MemcoreModel, is_stored
from memcore.scope import Scope

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLE_NAMES: tuple[str, ...] = get_args(Role)
"""The roles, in :data:`Role`'s order: the one list filters, indexes and tests read."""
"""The roles of the OpenAI chat-completions format."""

MetadataValue = str | int | float | bool | list[str]
"""What a metadata value may be: a scalar or a list of strings."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SUMMARY_KIND = "summary"
"""The ``kind`` of records that summarise older turns of a session."""
NOTE_KIND = "note"
"""The ``kind`` of explicit memories an agent or a tool writes (:meth:`memcore.agent.Memory.remember`)."""
METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
MAX_METADATA_KEYS = 128
"""The most metadata keys one record may carry: every backend indexes each key (Chroma as
columns of its metadata segment, which a record of thousands of keys breaks for every writer)."""
MAX_METADATA_LIST_ITEMS = 256
"""The most strings one list metadata value may hold."""
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")


class _MonotonicUtcClock:
    """UTC "now" that never repeats or goes backwards within the process.

    Records are ordered by ``created_at``; two writes in the same microsecond (or
    a wall clock stepped back) would otherwise make that order ambiguous.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = datetime.min.replace(tzinfo=UTC)

    def now(self) -> datetime:
        with self._lock:
            now = datetime.now(UTC)
            if now <= self._last:
                now = self._last + timedelta(microseconds=1)
            self._last = now
            return now


utc_now = _MonotonicUtcClock().now


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def in_utc(moment: datetime) -> datetime:
    """A timezone-aware datetime in UTC.

    :raises ValueError: if it is naive, or its UTC time falls outside the years 1-9999 (an
        aware time near either end, such as 0001-01-01 at +14:00).
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"a datetime must be timezone-aware, got {moment!r}")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{moment.isoformat()} is outside the years 1-9999 in UTC") from None


NEVER_EXPIRES = _EPOCH + timedelta(microseconds=2**53 - 1)
"""When a record without ``expires_at`` expires, as stores compare it (2255-06-05): the last
microsecond every engine compares exactly (float64 holds integers up to 2**53 exactly)."""


def epoch_micros(moment: datetime) -> int:
    """Microseconds since 1970-01-01 UTC of a timezone-aware datetime: exact, sortable, an integer.

    How stores keep ``created_at`` in their columns and payloads (below 2**53 until the year 2255).
    """
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class FunctionCall(MemcoreModel):
    """The function an assistant asks to call: its name and JSON arguments."""

    name: str
    arguments: str = "{}"


class ToolCall(MemcoreModel):
    """One tool call of an assistant message, in the OpenAI shape."""

    id: str = pydantic.Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(MemcoreModel):
    """One chat message.

    :param role: system, developer, user, assistant or tool.
    :param content: the text.
    :param name: an optional participant name.
    :param tool_calls: the calls an assistant message makes.
    :param tool_call_id: for a tool message, the id of the call it answers.
    """

    role: Role
    content: str
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None

    @pydantic.model_validator(mode="after")
    def _check_tool_fields(self, info: pydantic.ValidationInfo) -> Message:
        if is_stored(info):
            return self
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message needs tool_call_id, and only a tool message has one")
        return self

    def to_openai(self) -> dict[str, Any]:
        """The message as a chat-completions ``messages`` entry."""
        return self.model_dump(mode="json", exclude_none=True)


def _check_metadata_value(key: str, value: MetadataValue) -> None:
    if isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"metadata {key!r}: integers must fit in 64 bits, got {value}")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"metadata {key!r}: floats must be finite, got {value}")
    elif isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise ValueError(f"metadata {key!r}: lists may hold strings only")
        if len(value) > MAX_METADATA_LIST_ITEMS:
            raise ValueError(
                f"metadata {key!r}: lists hold at most {MAX_METADATA_LIST_ITEMS} strings, got {len(value)}"
            )


def is_metadata_entry(key: object, value: object) -> bool:
    """Whether ``key: value`` may be stored as is in :attr:`MemoryRecord.metadata`."""
    if not isinstance(key, str) or not METADATA_KEY.fullmatch(key):
        return False
    if not isinstance(value, (bool, str, int, float, list)):
        return False
    try:
        _check_metadata_value(key, value)
    except ValueError:
        return False
    return True


RecordKey = tuple[tuple[str | None, ...], UUID]
"""A record's identity as a dict key: its exact scope's fields and its id.

An id is unique only within one exact scope (two users may each hold a record of the same id), so
anything that gathers records from a scope wider than one exact scope keys them by this.
"""


def _is_none(value: object) -> bool:
    return value is None


class MemoryRecord(MemcoreModel):
    """One stored message and everything needed to find it again.

    :param id: the record's UUID, global across scopes; a new one by default.
    :param scope: who the record belongs to; never :meth:`Scope.everything`.
    :param message: the message itself.
    :param created_at: when it was written, timezone-aware (stored in UTC);
        strictly increasing within a process by default, so order is total.
    :param metadata: flat ``key -> value`` pairs, filterable as ``metadata.<key>``;
        at most :data:`MAX_METADATA_KEYS` keys, each an identifier of up to 64 characters.
    :param kind: what the record is: ``turn`` (default), ``summary``, ``note``...
    :param expires_at: when the record expires: from then on no read returns it, and
        ``purge()`` erases it. ``None`` (default) never expires. Before :data:`NEVER_EXPIRES`.
    :param updated_at: when :meth:`memcore.store.BaseStore.update` last changed it, or ``None``.
    """

    id: UUID = pydantic.Field(default_factory=uuid4)
    scope: Scope
    message: Message
    created_at: datetime = pydantic.Field(default_factory=utc_now)
    metadata: dict[str, MetadataValue] = pydantic.Field(default_factory=dict)
    kind: str = "turn"
    # Left out of the serialised form while unset: a record that never expires and was never
    # updated serialises as it did before these fields existed, so every store's copy stays as
    # small and older readers still parse it.
    expires_at: datetime | None = pydantic.Field(default=None, exclude_if=_is_none)
    updated_at: datetime | None = pydantic.Field(default=None, exclude_if=_is_none)

    @property
    def expires(self) -> datetime:
        """When the record expires, :data:`NEVER_EXPIRES` if it does not: the value filters compare."""
        return NEVER_EXPIRES if self.expires_at is None else self.expires_at

    def is_live(self, now: datetime) -> bool:
        """Whether the record is still visible at ``now``."""
        return self.expires > now

    @property
    def key(self) -> RecordKey:
        """The record's identity across scopes: its exact scope's fields and its id."""
        return (self.scope.as_tuple(), self.id)

    @classmethod
    def from_stored_json(cls, data: str | bytes) -> MemoryRecord:
        """A record a store reads back from the JSON it wrote (see :data:`memcore.model_base.STORED`).

        :raises InvalidRecordError: if ``data`` is not a record's JSON.
        """
        from memcore.stored_records import decode_stored  # it builds on this class

        return decode_stored(data)

    @pydantic.field_validator("created_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return in_utc(value)

    @pydantic.field_validator("expires_at", "updated_at")
    @classmethod
    def _optional_to_utc(cls, value: datetime | None, info: pydantic.ValidationInfo) -> datetime | None:
        if value is None:
            return None
        moment = in_utc(value)
        if info.field_name == "expires_at" and moment >= NEVER_EXPIRES and not is_stored(info):
            raise ValueError(
                f"expires_at must be before {NEVER_EXPIRES.isoformat()}, got {moment.isoformat()}"
            )
        return moment

    @pydantic.field_validator("metadata")
    @classmethod
    def _check_metadata(
        cls, metadata: dict[str, MetadataValue], info: pydantic.ValidationInfo
    ) -> dict[str, MetadataValue]:
        if is_stored(info):
            return metadata
        if len(metadata) > MAX_METADATA_KEYS:
            raise ValueError(
                f"a record carries at most {MAX_METADATA_KEYS} metadata keys, got {len(metadata)}"
            )
        for key, value in metadata.items():
            if not METADATA_KEY.fullmatch(key):
                raise ValueError(f"metadata key {key!r} is not an identifier of up to 64 characters")
            _check_metadata_value(key, value)
        return metadata

    @pydantic.field_validator("kind")
    @classmethod
    def _check_kind(cls, kind: str, info: pydantic.ValidationInfo) -> str:
        if not is_stored(info) and not _KIND.fullmatch(kind):
            raise ValueError(f"kind {kind!r} must be 1-32 lowercase letters, digits, _ or -")
        return kind

    @pydantic.model_validator(mode="after")
    def _check_scope(self, info: pydantic.ValidationInfo) -> MemoryRecord:
        if not is_stored(info) and self.scope.is_everything:
            raise ValueError("a record needs a concrete scope, not Scope.everything()")
        return self


class ScoredRecord(MemcoreModel):
    """A search hit: the record and its score (cosine similarity, higher is better)."""

    record: MemoryRecord
    score: float

    @classmethod
    def of(cls, record: MemoryRecord, score: float) -> ScoredRecord:
        """A hit for a record that is already a validated :class:`MemoryRecord`, without validating it again.

        Stores build hits this way: their records were validated when read back, and validating
        each again would be paid on every hit of every search.
        """
        return cls.model_construct(record=record, score=float(score))


class ContextRecord(MemcoreModel):
    """A record on its way into a model's context, with where it came from."""

    record: MemoryRecord
    score: float
    source: Literal["history", "recall"]
