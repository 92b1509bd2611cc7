"""An OpenAI Agents SDK ``Session`` over any memcore store (``memcore[openai-agents]``).

    from agents import Agent, RunConfig, Runner
    from memcore import Scope, open_embedder, open_store
    from memcore.integrations.openai_agents import MemcoreSession

    store = open_store("jsonl:///var/lib/agent")
    session = MemcoreSession("day-2", store, Scope(tenant="acme", user_id="alice", agent_id="travel"),
                             embedder=open_embedder("hash"))
    await Runner.run(agent, "Book my flight meal.", session=session)
    await Runner.run(agent, "And my seat?", session=session,
                     run_config=RunConfig(session_input_callback=session.recall_input_callback))

Each SDK item is one record of kind ``openai_agents_item`` (:data:`ITEM_KIND`) in the session's
scope, the given scope with ``session_id`` set. The item itself is kept as its JSON text (metadata
``oa_item``) and comes back equal to what was added, whatever its type: messages with content
parts, function calls and their outputs, reasoning, computer and custom tool calls. The record's
:class:`~memcore.records.Message` carries a readable form for search and recall: the item's role
(``function_call`` -> ``assistant`` with its tool call, a tool output -> ``tool``, other items ->
``assistant``) and its text.

Every read and delete of the session goes through its scope made exact
(:meth:`memcore.scope.Scope.exact`) and its kind, both filtered natively by every store: records of
another session, agent or user (also ones of this kind, carrying forged item JSON) are never
returned, popped or cleared, nor are other records of the session's own scope (an agent memory's
turns). Items come back in the order they were added, also within one ``add_items`` call (their
``created_at`` is strictly increasing, and never before the session's last item).

Recall is asked for, never implicit: :meth:`MemcoreSession.recall_input_callback` is a
``RunConfig.session_input_callback`` that puts, before the new input, one message summarising the
records of the wider scope (the policy's ``reach``: every session of the agent by default; this
session's own items excluded, they are in the history already) that best match the new user
message. The Runner does not store that message back: :meth:`MemcoreSession.add_items` drops the
items this session's callback produced. ``get_items`` returns the stored items only, as the Runner
also reads the session's tail (``get_items(limit=n)``) to reconcile and rewind its writes.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "memcore.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'memcore[openai-agents]'"
    ) from exc

from memcore.agent.blocks import VectorBlock, embedding_text
from memcore.agent.memories import RECALL_FILTER
from memcore.agent.policy import MemoryPolicy
from memcore.embedders.base import Embedder
from memcore.embedders.cache import CachedEmbedder, cached
from memcore.errors import (
    InvalidInputError,
    InvalidLimitError,
    RecordTooLargeError,
    ScopeError,
    UnsupportedOperationError,
)
from memcore.filters import FilterSpec
from memcore.records import FunctionCall, MemoryRecord, Message, MetadataValue, Role, ToolCall, utc_now
from memcore.scope import Scope, validate_scope_value
from memcore.store import Store, VectorSpace
from memcore.validation import MAX_LIMIT, MAX_RECORD_BYTES, TTL, check_scope, check_ttl

ITEM_KIND = "openai_agents_item"
"""The ``kind`` of the records that hold the SDK's items."""

ITEM_KEY = "oa_item"
"""The metadata key of an item's JSON text."""
TYPE_KEY = "oa_type"
"""The metadata key of an item's ``type`` (``message`` for a message without one)."""
OWNER_KEY = "oa_session"
"""The metadata key of the session's scope digest, so recall can leave the session's own items out."""

MAX_TEXT_CHARS = 16_384
"""The readable text of an item (what search and recall match) is cut to this many characters."""

RecallRole = Literal["developer", "system", "user"]

_ITEMS: FilterSpec = {"kind": ITEM_KIND}
_CHAT_ROLES: frozenset[str] = frozenset({"user", "assistant", "system", "developer"})
_NOT_TEXT = frozenset(
    {
        "id",
        "type",
        "role",
        "status",
        "call_id",
        "detail",
        "encrypted_content",
        "image_url",
        "file_data",
        "file_id",
    }
)
"""Item fields that are identifiers or payloads, not words anyone would search for."""
_RECALL_HEADER = "Memories from earlier conversations that may be relevant (memcore recall):"
_TICK = timedelta(microseconds=1)


class MemcoreSession:
    """An OpenAI Agents SDK session whose items are records of ``store``, in ``scope`` + ``session_id``.

    It implements the SDK's ``Session`` protocol (``get_items``, ``add_items``, ``pop_item``,
    ``clear_session``, all async, on the store's async API), so ``Runner.run(agent, text,
    session=session)`` keeps its history in memcore.

    :param session_id: the conversation; a scope value (1-128 characters of ``[A-Za-z0-9._:@-]``).
    :param store: any memcore store; it is not closed by this object.
    :param scope: the owner of the session (tenant, user, agent). It may name ``session_id`` only
        if it is ``session_id`` itself.
    :param embedder: embeds each item's text when it is added and recall queries; the store is
        bound to it (a store of another embedder is refused). Without one, items are stored
        without vectors and recall matches keywords (BM25) only.
    :param policy: recall settings: ``limit`` (how many records), ``reach`` (how far from the
        session), ``recall_mode`` and ``max_chars`` (where a recalled text is cut).
    :param ttl: how long items live (a timedelta or seconds); ``None`` (default) keeps them until
        deleted. Needs a store with ``capabilities.expiry``.
    :param recall_role: the role of the recalled-memories message (``developer`` by default; use
        ``system`` or ``user`` for a model that knows no developer role).
    :param session_settings: the SDK's session settings (``limit``: the default of
        :meth:`get_items`).
    :raises ScopeError: for a session id that is not a scope value, or a scope naming another session.
    :raises UnsupportedOperationError: for a ``ttl`` on a store that cannot expire records.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store,
        scope: Scope,
        *,
        embedder: Embedder | None = None,
        policy: MemoryPolicy | None = None,
        ttl: TTL | None = None,
        recall_role: RecallRole = "developer",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        validate_scope_value(session_id)
        owner = check_scope(scope)
        if owner.is_everything:
            raise ScopeError("a session needs an owner scope, not Scope.everything()")
        if owner.session_id not in (None, session_id):
            raise ScopeError(
                f"scope names session {owner.session_id!r}, not {session_id!r}: pass the owner's scope"
            )
        if policy is not None and not isinstance(policy, MemoryPolicy):
            raise InvalidInputError(f"policy must be a MemoryPolicy, got {type(policy).__name__}")
        if ttl is not None and not store.capabilities.expiry:
            raise UnsupportedOperationError(f"the {store.name} store cannot expire items: leave ttl unset")
        if recall_role not in ("developer", "system", "user"):
            raise InvalidInputError(f"recall_role must be developer, system or user, got {recall_role!r}")
        self.session_id = session_id
        self.store = store
        self.scope = Scope(**{**dict(owner.items()), "session_id": session_id})
        self.policy = policy or MemoryPolicy()
        self.ttl = None if ttl is None else check_ttl(ttl)
        self.recall_role: RecallRole = recall_role
        self.session_settings = (
            SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
        )
        self._own = self.scope.exact()
        self._owner_digest = self.scope.digest()
        self._embedder: CachedEmbedder | None = None
        self._block: VectorBlock | None = None
        if embedder is not None:
            self._embedder = cached(embedder)
            store.bind_vector_space(VectorSpace(self._embedder.name, self._embedder.dim))
            self._block = VectorBlock(
                store,
                self._embedder,
                self.recall_scope,
                self.policy.limit,
                mode=self.policy.recall_mode,
                hybrid=self.policy.hybrid,
            )
        # The recall messages this session's callback produced and the Runner has not yet handed
        # back to add_items (it stores what a callback adds as new input).
        self._recalled: deque[str] = deque(maxlen=64)
        self._last_stamp = datetime.min.replace(tzinfo=UTC)

    @property
    def recall_scope(self) -> Scope:
        """The scope recall reads: the policy's ``reach`` from the session (its agent by default)."""
        return self.policy.recall_scope(self.scope)

    # -- the Session protocol --------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first.

        :param limit: the latest this many, in chronological order; ``None`` uses
            ``session_settings.limit``, and when that is ``None`` too, every item. ``0`` or less
            gives none.
        :raises InvalidLimitError: for a limit that is not an integer.
        """
        resolved = resolve_session_limit(_checked_limit(limit), self.session_settings)
        resolved = _checked_limit(resolved)
        if resolved is None:
            return _items(await self.store.alist(self._own, filter=_ITEMS))
        if resolved <= 0:
            return []
        window = resolved
        while True:  # widen the read while unreadable records take up places among the latest
            read = min(window, MAX_LIMIT)
            newest = await self.store.alist(self._own, filter=_ITEMS, order="desc", limit=read)
            items = _items(reversed(newest))
            if len(items) >= resolved or len(newest) < read:
                return items[-resolved:]
            if read == MAX_LIMIT:
                return _items(await self.store.alist(self._own, filter=_ITEMS))[-resolved:]
            window *= 2

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` after the session's last item, in their order, all or none.

        A recall message :meth:`recall_input_callback` produced is not stored.

        :raises InvalidInputError: for an item that is not a JSON object that round-trips exactly
            through JSON (non-string keys, NaN, objects JSON cannot encode).
        :raises RecordTooLargeError: for an item over memcore's record size (1 MiB with its text).
        """
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise InvalidInputError(f"add_items takes a list of items, got {type(items).__name__}")
        encoded = [_encoded(index, item) for index, item in enumerate(items)]
        kept = [
            (item, text) for item, text in zip(items, encoded, strict=True) if not self._was_recalled(text)
        ]
        if not kept:
            return
        stamps = await self._stamps(len(kept))
        records = [
            self._record(index, cast(Mapping[str, Any], item), text, stamp)
            for index, ((item, text), stamp) in enumerate(zip(kept, stamps, strict=True))
        ]
        vectors = None
        if self._embedder is not None:
            vectors = await self._embedder.aembed([embedding_text(record.message) for record in records])
        await self.store.aadd(records, vectors, ttl=self.ttl)

    async def pop_item(self) -> TResponseInputItem | None:
        """Delete the session's latest item from the store (every read path) and return it.

        :returns: the item, or ``None`` when the session has none.
        """
        while True:
            newest = await self.store.alist(self._own, filter=_ITEMS, order="desc", limit=1)
            if not newest:
                return None
            record = newest[0]
            if not await self.store.adelete(self._own, [record.id]):
                continue  # another pop took it first
            item = _decoded(record)
            if item is not None:
                return item
            # An unreadable record is dropped, as SQLiteSession drops rows that are not JSON.

    async def clear_session(self) -> None:
        """Delete every item of the session, and nothing else: not another session's items, nor
        other records of the session's scope."""
        await self.store.adelete_where(self._own, _ITEMS)

    # -- recall ------------------------------------------------------------------------------------

    async def recall(self, query: str, *, limit: int | None = None) -> list[MemoryRecord]:
        """The records of :attr:`recall_scope` that best match ``query``, best first.

        This session's own items are left out (they are the history), and so are system and
        developer messages, tool results and tool calls: they are not memories of a conversation.

        :param limit: how many (default: the policy's ``limit``).
        :raises InvalidInputError: for a query that is not a non-empty string.
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"a recall query is a non-empty string, got {query!r}")
        wanted = self.policy.limit if limit is None else limit
        if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
            raise InvalidLimitError(f"limit must be a positive integer, got {wanted!r}")
        spec: FilterSpec = {"$and": [RECALL_FILTER, {f"metadata.{OWNER_KEY}": {"$ne": self._owner_digest}}]}
        fetch = min(2 * wanted, MAX_LIMIT)
        if self._block is None:
            hits = await self.store.asearch(self.recall_scope, keywords=query, filter=spec, limit=fetch)
            records = [hit.record for hit in hits]
        else:
            found = await self._block.aretrieve(query, filter=spec, limit=fetch)
            records = [hit.record for hit in found]
        return [record for record in records if not record.message.tool_calls][:wanted]

    async def recall_item(self, query: str) -> TResponseInputItem | None:
        """One input message listing what :meth:`recall` finds for ``query``, or ``None`` if nothing.

        Each record is one line, ``(role) text``, its text cut at the policy's ``max_chars``.
        """
        records = await self.recall(query)
        if not records:
            return None
        cut = self.policy.max_chars
        lines = [_RECALL_HEADER]
        for record in records:
            text = record.message.content
            text = text if len(text) <= cut else text[:cut] + "…"
            lines.append(f"- ({record.message.role}) {text}")
        return cast(TResponseInputItem, {"role": self.recall_role, "content": "\n".join(lines)})

    async def recall_input_callback(
        self, history: list[TResponseInputItem], new_items: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        """A ``RunConfig.session_input_callback``: the history, then the recalled memories for the
        latest user message of ``new_items`` (if recall finds any), then ``new_items``.

        The recall message is the model's input for this run only: the Runner hands it to
        :meth:`add_items` with the new input, which drops it.
        """
        query = _latest_user_text(new_items)
        recalled = None if query is None else await self.recall_item(query)
        if recalled is None:
            return [*history, *new_items]
        self._recalled.append(_canonical(recalled))
        return [*history, recalled, *new_items]

    # -- internals ---------------------------------------------------------------------------------

    def _was_recalled(self, text: str) -> bool:
        if not self._recalled:  # the common case: no recall message is waiting to be dropped
            return False
        canonical = _canonical(json.loads(text))
        if canonical in self._recalled:
            self._recalled.remove(canonical)
            return True
        return False

    async def _stamps(self, count: int) -> list[datetime]:
        """``count`` increasing creation times, after the session's latest item and after every
        time this object handed out (a clock that stepped back, another process's clock running
        ahead, or two concurrent calls must not put new items before old ones, nor tie them)."""
        latest = await self.store.alist(self._own, filter=_ITEMS, order="desc", limit=1)
        # No await from here on: concurrent calls on this loop take their times one after the other.
        floor = max(latest[0].created_at, self._last_stamp) if latest else self._last_stamp
        stamps = [utc_now() for _ in range(count)]
        if stamps[0] <= floor:
            shift = floor - stamps[0] + _TICK
            stamps = [stamp + shift for stamp in stamps]
        self._last_stamp = stamps[-1]
        return stamps

    def _record(self, index: int, item: Mapping[str, Any], text: str, stamp: datetime) -> MemoryRecord:
        item_type = item.get("type")
        metadata: dict[str, MetadataValue] = {
            ITEM_KEY: text,
            TYPE_KEY: item_type if isinstance(item_type, str) and item_type else "message",
            OWNER_KEY: self._owner_digest,
        }
        record = MemoryRecord(
            scope=self.scope,
            message=readable_message(item),
            kind=ITEM_KIND,
            metadata=metadata,
            created_at=stamp,
        )
        size = len(record.model_dump_json().encode())
        if size > MAX_RECORD_BYTES:
            raise RecordTooLargeError(
                f"item {index} ({metadata[TYPE_KEY]}) takes {size} bytes stored; "
                f"the limit is {MAX_RECORD_BYTES}"
            )
        return record


def readable_message(item: Mapping[str, Any]) -> Message:
    """The memcore message that stands for an SDK item in search and recall.

    Chat messages keep their role and text; a ``function_call`` is an assistant message with that
    tool call; an item with a ``call_id`` whose type ends in ``_output`` is a tool message; any
    other item is an assistant message of its text (or of ``[type]`` when it has none).
    """
    item_type = item.get("type")
    kind = item_type if isinstance(item_type, str) and item_type else "message"
    role = item.get("role")
    call_id = item.get("call_id")
    has_call_id = isinstance(call_id, str) and bool(call_id)
    text = _clean(" ".join(_texts(item)))
    if kind == "message" and isinstance(role, str) and role in _CHAT_ROLES:
        return Message(role=cast(Role, role), content=text or f"[{kind}]")
    name, arguments = item.get("name"), item.get("arguments")
    if kind == "function_call" and has_call_id and isinstance(name, str) and isinstance(arguments, str):
        call = ToolCall(id=cast(str, call_id), function=FunctionCall(name=name, arguments=arguments))
        return Message(role="assistant", content="", tool_calls=(call,))
    if kind.endswith("_output") and has_call_id:
        return Message(role="tool", content=text or f"[{kind}]", tool_call_id=cast(str, call_id))
    return Message(role="assistant", content=text or f"[{kind}]")


def _texts(value: Any, key: str | None = None) -> Iterator[str]:
    """The words of an item: its string values, outside identifier and payload fields."""
    if key in _NOT_TEXT:
        return
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, Mapping):
        for child_key, child in value.items():
            yield from _texts(child, child_key if isinstance(child_key, str) else None)
    elif isinstance(value, list):
        for child in value:
            yield from _texts(child)


def _clean(text: str) -> str:
    """``text`` cut to :data:`MAX_TEXT_CHARS`, with lone surrogates (which no store can encode)
    replaced; the item's JSON keeps them."""
    text = text[:MAX_TEXT_CHARS]
    return text.encode("utf-8", "replace").decode("utf-8")


def _checked_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidLimitError(f"limit must be an integer or None, got {limit!r}")
    return limit


def _encoded(index: int, item: object) -> str:
    """An item's JSON text, refused unless it decodes back to an equal item."""
    if not isinstance(item, dict):
        raise InvalidInputError(f"item {index} must be a dict (a JSON object), got {type(item).__name__}")
    try:
        text = json.dumps(item, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"item {index} is not JSON: {exc}") from None
    if json.loads(text) != item:
        raise InvalidInputError(
            f"item {index} does not come back from JSON unchanged (non-string keys or tuples?)"
        )
    return text


def _decoded(record: MemoryRecord) -> TResponseInputItem | None:
    text = record.metadata.get(ITEM_KEY)
    if not isinstance(text, str):
        return None
    try:
        item = json.loads(text)
    except ValueError:
        return None
    return cast(TResponseInputItem, item) if isinstance(item, dict) else None


def _items(records: Iterator[MemoryRecord] | Sequence[MemoryRecord]) -> list[TResponseInputItem]:
    return [item for record in records if (item := _decoded(record)) is not None]


def _canonical(item: object) -> str:
    return json.dumps(item, sort_keys=True)


def _latest_user_text(items: Sequence[TResponseInputItem]) -> str | None:
    for item in reversed(items):
        if isinstance(item, Mapping) and item.get("role") == "user":
            text = " ".join(_texts(item)).strip()
            if text:
                return text
    return None
