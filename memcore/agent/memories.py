"""Agent memories: what to write, what to recall, and the context a model sees.

* :class:`ChatHistoryMemory`: the recent window of one conversation.
* :class:`VectorMemory`: recall by similarity to a query.
* :class:`LongtermMemory`: both. It retrieves, in this order:

  1. the first system (or developer) message of the conversation, pinned;
  2. recalled records that are not already in the recent window (deduplicated
     by id), oldest first;
  3. the recent window, in time order.

  ``get_context`` hands them to a context creator, which keeps the system
  message first and everything else in time order: the same order whenever the
  recalled records predate the window (the usual case); a recalled record newer
  than part of the window (from a parallel session) is placed at its time, so
  that a later fact always follows an earlier one.

Every memory writes into its own :class:`~memcore.scope.Scope`, reads its history
there, and recalls within the wider scope its :class:`~memcore.agent.policy.MemoryPolicy`
allows. A record is written once, with its vector; ``forget`` deletes it by id
from the store, so it disappears from history and recall alike.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from memcore.agent.blocks import PINNED_ROLES, ChatHistoryBlock, VectorBlock, check_in_scope, embedding_text
from memcore.agent.context import ContextCreator, ScoreBasedContextCreator
from memcore.agent.policy import MemoryPolicy
from memcore.embedders.base import Embedder
from memcore.embedders.cache import cached
from memcore.errors import ContextBudgetError, InvalidInputError, InvalidRecordError, RecordNotFoundError
from memcore.filters import Filter, FilterSpec
from memcore.records import (
    NOTE_KIND,
    ContextRecord,
    MemoryRecord,
    Message,
    MetadataValue,
    RecordKey,
    utc_now,
)
from memcore.scope import Scope
from memcore.store import KEEP, Store, VectorSpace, _Keep
from memcore.telemetry import internal_span, memory_operation, note_query, note_records
from memcore.validation import TTL, Matrix, check_ids, check_ttl

DEFAULT_TOKEN_LIMIT = 4_096
NO_MEMORIES_NOTE = "No relevant memories were found for this conversation."
RECALL_FILTER: FilterSpec = {"role": {"$nin": [*PINNED_ROLES, "tool"]}}
"""Recall skips system prompts and tool results: they are not memories of the conversation."""
TOOL_CALL_LOOKBACK = 50
"""How many recent assistant messages a tool result's call is looked for among."""

BufferState = Literal["open", "finished", "discarded", "committed"]
NoteRole = Literal["user", "assistant"]
POLICY_TTL: Literal["policy"] = "policy"
"""``remember(ttl=POLICY_TTL)``, the default: the note lives as long as the policy's ``ttl`` says."""


def _texts_of(messages: Sequence[Message]) -> list[str]:
    """What a write of ``messages`` embeds; nothing unless they are all messages (the write then
    refuses them itself)."""
    if not isinstance(messages, Sequence) or not all(isinstance(message, Message) for message in messages):
        return []
    return [embedding_text(message) for message in messages]


class WriteBuffer:
    """The writes of one parallel task, held back until :meth:`AgentMemory.barrier`.

    Use it as a context manager around the task: leaving the block normally
    finishes the buffer (or call :meth:`finish`); an exception discards it.
    Readers never see buffered records before the barrier commits them.
    """

    def __init__(self, position: int) -> None:
        self.position = position
        self.state: BufferState = "open"
        self._messages: list[tuple[Message, str, dict[str, MetadataValue]]] = []
        self._lock = threading.Lock()

    def write(
        self,
        messages: Sequence[Message],
        *,
        kind: str = "turn",
        metadata: dict[str, MetadataValue] | None = None,
    ) -> None:
        """Buffer messages; the barrier makes them records of the memory's scope."""
        with self._lock:
            if self.state != "open":
                raise InvalidInputError(f"buffer #{self.position} is {self.state}; it takes no more writes")
            self._messages.extend((message, kind, dict(metadata or {})) for message in messages)

    def finish(self) -> None:
        """Mark the task done: the next barrier commits this buffer."""
        with self._lock:
            if self.state == "open":
                self.state = "finished"

    def discard(self) -> None:
        """Drop everything buffered: the barrier writes nothing of this buffer."""
        with self._lock:
            if self.state != "committed":
                self.state = "discarded"
                self._messages.clear()

    def pending(self) -> list[tuple[Message, str, dict[str, MetadataValue]]]:
        """What the barrier will write (nothing unless finished)."""
        with self._lock:
            return list(self._messages) if self.state == "finished" else []

    def mark_committed(self) -> None:
        with self._lock:
            self.state = "committed"
            self._messages.clear()

    def __enter__(self) -> WriteBuffer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.discard()


class AgentMemory(ABC):
    """What every memory offers: write, retrieve, get_context, forget, clear, buffers.

    Each call has an async twin (``awrite``, ``aget_context``, ...) that runs the same code on
    the store's worker threads (:meth:`~memcore.store.BaseStore.run_in_worker`), so an event loop
    serving many agents never waits for the store or the embedder.

    :param store: where the records live.
    :param scope: the memory's own scope: records are written into it, its
        history is read from it, and :meth:`clear` empties exactly it.
    :param token_limit: the default budget of :meth:`get_context`.
    :param context_creator: fits records into the budget (default: drops the
        lowest-scored first; history scores fall with age from 1.0 to 1/window).
    :param policy: saving and recall settings.
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        *,
        token_limit: int = DEFAULT_TOKEN_LIMIT,
        context_creator: ContextCreator | None = None,
        policy: MemoryPolicy | None = None,
    ) -> None:
        if scope.is_everything:
            raise InvalidInputError("a memory needs a concrete scope, not Scope.everything()")
        if isinstance(token_limit, bool) or not isinstance(token_limit, int) or token_limit < 1:
            raise ContextBudgetError(f"token_limit must be a positive integer, got {token_limit!r}")
        self.store, self.scope, self.token_limit = store, scope, token_limit
        self.context_creator = context_creator or ScoreBasedContextCreator()
        self.policy = policy or MemoryPolicy()
        self._buffers: list[WriteBuffer] = []
        self._buffers_lock = threading.Lock()

    @property
    def recall_scope(self) -> Scope:
        """The scope recall reads (and ``forget`` by id reaches): the memory's own by default."""
        return self.scope

    @abstractmethod
    def _store_records(self, records: Sequence[MemoryRecord]) -> None:
        """Write checked records to the store, once each."""

    @abstractmethod
    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """The candidate records for the next model call."""

    @memory_operation("create_memory")
    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store records of the memory's scope, once each.

        :raises ScopeError: for a record outside the memory's scope.
        :raises InvalidRecordError: for a tool result whose call is neither in
            the batch nor among the scope's recent assistant messages.
        """
        check_in_scope(self.scope.exact(), records)
        self._check_tool_results([record.message for record in records])
        self._store_records(records)

    def _check_tool_results(self, messages: Sequence[Message]) -> None:
        calls: set[str] = set()
        missing: list[str] = []
        for message in messages:
            calls.update(call.id for call in message.tool_calls or ())
            if message.tool_call_id is not None and message.tool_call_id not in calls:
                missing.append(message.tool_call_id)
        if not missing:
            return
        recent = self.store.list(
            self.scope.exact(), filter={"role": "assistant"}, order="desc", limit=TOOL_CALL_LOOKBACK
        )
        calls.update(call.id for record in recent for call in record.message.tool_calls or ())
        orphans = [call_id for call_id in missing if call_id not in calls]
        if orphans:
            raise InvalidRecordError(f"tool results answer calls this memory has not seen: {orphans}")

    @memory_operation("create_memory")
    def write(
        self,
        messages: Sequence[Message],
        *,
        kind: str = "turn",
        metadata: dict[str, MetadataValue] | None = None,
    ) -> list[MemoryRecord]:
        """Store messages as records of the memory's scope; return the records."""
        expires_at = self._expiry()
        records = [
            MemoryRecord(
                scope=self.scope,
                message=message,
                kind=kind,
                metadata=dict(metadata or {}),
                expires_at=expires_at,
            )
            for message in messages
        ]
        self.write_records(records)
        return records

    def _expiry(self) -> datetime | None:
        """When a record written now expires under the policy's ``ttl`` (``None``: never)."""
        return None if self.policy.ttl is None else self.store.expiry_after(self.policy.ttl)

    @memory_operation("upsert_memory")
    def remember(
        self,
        text: str,
        *,
        role: NoteRole = "assistant",
        name: str | None = None,
        metadata: dict[str, MetadataValue] | None = None,
        supersedes: Sequence[UUID | str] = (),
        ttl: TTL | Literal["policy"] | None = POLICY_TTL,
    ) -> MemoryRecord:
        """Store an explicit memory, a note (``kind="note"``), that an agent or a tool decided to keep.

        A memory that embeds consolidates at write time: a note of the same speaker (role and
        name) at least ``policy.consolidation_threshold`` similar, in the recall scope and of the
        memory's own tenant, user and agent (any of their sessions; never another owner's
        record, which this memory may read but not write), is refreshed instead — its text and
        vector replaced, ``metadata`` merged in, its expiry set by ``ttl``, ``updated_at``
        stamped — and returned, so repeating a fact never piles up copies of it.

        :param supersedes: ids of older notes this one replaces: they are deleted (from
            history and recall, as :meth:`forget` does) once this one is stored, and their ids
            kept in its ``metadata["supersedes"]``.
        :param ttl: how long the note lives: a timedelta or seconds, ``None`` for ever, or the
            policy's ``ttl`` (default; with none, a refreshed note keeps its expiry).
        :returns: the note as stored (the refreshed one, when consolidated).
        :raises InvalidIdError: for a malformed id in ``supersedes``, before anything is written.
        """
        if isinstance(supersedes, (str, UUID)) or not isinstance(supersedes, Sequence):
            raise InvalidInputError("supersedes takes a sequence of record ids")
        retired = [str(record_id) for record_id in check_ids(supersedes)]
        fields = dict(metadata or {})
        if retired:
            fields["supersedes"] = retired
        message = Message(role=role, content=text, name=name)
        lifetime = self.policy.ttl if ttl == POLICY_TTL else None if ttl is None else check_ttl(ttl)
        expires_at = None if lifetime is None else self.store.expiry_after(lifetime)
        vector = self._vector_of(text)
        note: MemoryRecord | None = None
        similar = self._similar_note(message, vector)
        if similar is not None:
            try:
                note = self.store.update(
                    similar.scope.exact(),
                    similar.id,
                    content=text,
                    metadata=fields,
                    ttl=KEEP if ttl == POLICY_TTL and lifetime is None else lifetime,
                    vector=None if vector is None else vector[0],
                )
            except RecordNotFoundError:  # deleted or expired meanwhile: write a new one
                note = None
        if note is None:
            note = MemoryRecord(
                scope=self.scope, message=message, kind=NOTE_KIND, metadata=fields, expires_at=expires_at
            )
            self.write_records([note])
        others = [record_id for record_id in retired if record_id != str(note.id)]
        if others:
            self.store.delete(self.recall_scope, others)
        return note

    @memory_operation("upsert_memory")
    async def aremember(
        self,
        text: str,
        *,
        role: NoteRole = "assistant",
        name: str | None = None,
        metadata: dict[str, MetadataValue] | None = None,
        supersedes: Sequence[UUID | str] = (),
        ttl: TTL | Literal["policy"] | None = POLICY_TTL,
    ) -> MemoryRecord:
        """:meth:`remember`, awaited."""
        if isinstance(text, str):
            await self._embed_ahead([text])
        return await self.store.run_in_worker(
            self.remember, text, role=role, name=name, metadata=metadata, supersedes=supersedes, ttl=ttl
        )

    @memory_operation("update_memory")
    def update(
        self,
        id: UUID | str,
        *,
        content: str | None = None,
        metadata: Mapping[str, MetadataValue | None] | None = None,
        ttl: TTL | _Keep | None = KEEP,
    ) -> MemoryRecord:
        """Change a record the memory can show (its own scope or the recall scope), as
        :meth:`memcore.store.BaseStore.update` does; new content is embedded again, so recall
        finds the record by what it says now.

        :raises RecordNotFoundError: if no live record has this id in the recall scope.
        """
        vector = None if content is None else self._vector_of(content)
        return self.store.update(
            self.recall_scope,
            id,
            content=content,
            metadata=metadata,
            ttl=ttl,
            vector=None if vector is None else vector[0],
        )

    @memory_operation("update_memory")
    async def aupdate(
        self,
        id: UUID | str,
        *,
        content: str | None = None,
        metadata: Mapping[str, MetadataValue | None] | None = None,
        ttl: TTL | _Keep | None = KEEP,
    ) -> MemoryRecord:
        """:meth:`update`, awaited."""
        if isinstance(content, str):
            await self._embed_ahead([content])
        return await self.store.run_in_worker(self.update, id, content=content, metadata=metadata, ttl=ttl)

    def _vector_of(self, text: str) -> Matrix | None:
        """The vector a memory that embeds stores for ``text`` (``None`` for one that does not)."""
        return None

    def _similar_note(self, message: Message, vector: Matrix | None) -> MemoryRecord | None:
        """A live note of the recall scope that ``message`` repeats (see :meth:`remember`)."""
        return None

    @memory_operation("create_memory")
    async def awrite(
        self,
        messages: Sequence[Message],
        *,
        kind: str = "turn",
        metadata: dict[str, MetadataValue] | None = None,
    ) -> list[MemoryRecord]:
        """:meth:`write`, awaited (on the store's workers, as every async twin of a memory)."""
        await self._embed_ahead(_texts_of(messages))
        return await self.store.run_in_worker(self.write, messages, kind=kind, metadata=metadata)

    @memory_operation("create_memory")
    async def awrite_records(self, records: Sequence[MemoryRecord]) -> None:
        """:meth:`write_records`, awaited."""
        own = self.scope.exact()
        if isinstance(records, Sequence) and all(
            isinstance(record, MemoryRecord) and own.matches(record.scope) for record in records
        ):
            await self._embed_ahead(_texts_of([record.message for record in records]))
        await self.store.run_in_worker(self.write_records, records)

    async def _embed_ahead(self, texts: list[str]) -> None:
        """Before a twin runs on the store's workers: embed what it will, where a memory embeds
        (:class:`VectorMemory`), so that the store's workers never wait for the model. Only for
        input the sync call accepts: anything else gets its error from the sync call itself."""
        return None

    async def _embed_query_ahead(self, query: str | None) -> None:
        """:meth:`_embed_ahead` for a recall query."""
        return None

    @memory_operation("create_memory")
    def observe(self, messages: Sequence[Message]) -> list[MemoryRecord]:
        """Store the turns an agent loop shows the memory, if the policy auto-saves."""
        return self.write(messages) if self.policy.auto_save else []

    @memory_operation("create_memory")
    async def aobserve(self, messages: Sequence[Message]) -> list[MemoryRecord]:
        """:meth:`observe`, awaited."""
        if self.policy.auto_save:
            await self._embed_ahead(_texts_of(messages))
        return await self.store.run_in_worker(self.observe, messages)

    @memory_operation("search_memory")
    async def aretrieve(self, query: str | None = None) -> list[ContextRecord]:
        """:meth:`retrieve`, awaited."""
        await self._embed_query_ahead(query)
        return await self.store.run_in_worker(self.retrieve, query)

    @memory_operation("search_memory")
    def get_context(
        self, token_limit: int | None = None, *, query: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """The messages for the next model call and their token count, within ``token_limit``."""
        records = [self._shorten(r) if r.source == "recall" else r for r in self.retrieve(query)]
        note_records(records)
        limit = self.token_limit if token_limit is None else token_limit
        with internal_span("memcore.context.create") as span:
            context = self.context_creator.create_context(records, limit)
            if span is not None and span.is_recording():
                span.set_attribute("memcore.context.creator", type(self.context_creator).__name__)
                span.set_attribute("memcore.context.records", len(records))
                span.set_attribute("memcore.context.messages", len(context[0]))
                span.set_attribute("memcore.context.tokens", context[1])
                if isinstance(limit, int):
                    span.set_attribute("memcore.context.token_limit", limit)
        return context

    @memory_operation("search_memory")
    async def aget_context(
        self, token_limit: int | None = None, *, query: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """:meth:`get_context`, awaited: recall, the window and fitting the budget, off the loop."""
        await self._embed_query_ahead(query)
        return await self.store.run_in_worker(self.get_context, token_limit, query=query)

    def _shorten(self, item: ContextRecord) -> ContextRecord:
        message = item.record.message
        if len(message.content) <= self.policy.max_chars:
            return item
        cut = message.model_copy(update={"content": message.content[: self.policy.max_chars] + "…"})
        return item.model_copy(update={"record": item.record.model_copy(update={"message": cut})})

    @memory_operation("delete_memory")
    def forget(self, ids: Sequence[UUID | str]) -> int:
        """Delete these records from the store (history and recall alike); return how many.

        Reaches every record the memory can show: its own scope and, for
        memories that recall, the recall scope. Ids are unique only within one exact scope: where
        the recall scope spans several (every session of an agent, by default), each record of an
        id given here is deleted. To delete in the memory's own scope only, use
        ``store.delete(memory.scope.exact(), ids)``.
        """
        return self.store.delete(self.recall_scope, ids)

    @memory_operation("delete_memory")
    async def aforget(self, ids: Sequence[UUID | str]) -> int:
        """:meth:`forget`, awaited."""
        return await self.store.run_in_worker(self.forget, ids)

    @memory_operation("delete_memory")
    def forget_where(self, filter: FilterSpec | Filter, *, in_recall_scope: bool = False) -> int:
        """Delete the records of the memory's own scope that match ``filter``; return how many.

        :param in_recall_scope: reach the whole recall scope instead (for the
            default policy: every session of the agent).
        """
        return self.store.delete_where(self.recall_scope if in_recall_scope else self.scope.exact(), filter)

    @memory_operation("delete_memory")
    async def aforget_where(self, filter: FilterSpec | Filter, *, in_recall_scope: bool = False) -> int:
        """:meth:`forget_where`, awaited."""
        return await self.store.run_in_worker(self.forget_where, filter, in_recall_scope=in_recall_scope)

    @memory_operation("delete_memory")
    def clear(self) -> int:
        """Delete every record of the memory's own scope, and nothing else: not the records of
        an agent or a session below it (they belong to memories of their own)."""
        return self.store.delete_where(self.scope.exact(), {})

    @memory_operation("delete_memory")
    async def aclear(self) -> int:
        """:meth:`clear`, awaited."""
        return await self.store.run_in_worker(self.clear)

    def buffer(self) -> WriteBuffer:
        """A buffer for one parallel task's writes; :meth:`barrier` commits it.

        Buffers are committed in the order they were created here (their
        declaration order), whatever order the tasks finish in.
        """
        with self._buffers_lock:
            created = WriteBuffer(len(self._buffers))
            self._buffers.append(created)
        return created

    @memory_operation("create_memory")
    def barrier(self) -> list[MemoryRecord]:
        """Commit every finished buffer in declaration order, in one batch; skip discarded ones.

        Records are stamped in declaration order, so history reads them in that
        order. If writing fails, nothing is committed and the buffers stay
        pending, so the barrier can be retried.

        :raises InvalidInputError: if a buffer is still open (its task has not
            finished): a barrier comes after every task.
        """
        with self._buffers_lock:
            still_open = [b.position for b in self._buffers if b.state == "open"]
            if still_open:
                raise InvalidInputError(
                    f"buffers {still_open} are still open: call barrier() after every task has left its "
                    "`with buffer:` block (or called finish() or discard())"
                )
            pending = [b for b in self._buffers if b.state == "finished"]
            expires_at = self._expiry()  # one batch, one expiry, as write() gives
            records = [
                MemoryRecord(
                    scope=self.scope,
                    message=message,
                    kind=kind,
                    metadata=metadata,
                    created_at=utc_now(),
                    expires_at=expires_at,
                )
                for buffer in pending
                for message, kind, metadata in buffer.pending()
            ]
            if records:
                self.write_records(records)
            for buffer in pending:
                buffer.mark_committed()
            self._buffers = []
        return records

    @memory_operation("create_memory")
    async def abarrier(self) -> list[MemoryRecord]:
        """:meth:`barrier`, awaited."""
        return await self.store.run_in_worker(self.barrier)


class ChatHistoryMemory(AgentMemory):
    """The recent window of one conversation, with its system message pinned.

    :param window: how many recent records the context holds.
    """

    def __init__(self, store: Store, scope: Scope, *, window: int = 20, **options: Any) -> None:
        super().__init__(store, scope, **options)
        self.history = ChatHistoryBlock(store, scope.exact(), window)

    def _store_records(self, records: Sequence[MemoryRecord]) -> None:
        self.history.write_records(records)

    @memory_operation("search_memory")
    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """The pinned system message and the recent window; ``query`` is not used."""
        return self.history.retrieve()


class VectorMemory(AgentMemory):
    """Recall by similarity, within the scope the policy allows.

    :param embedder: embeds records when written and queries when recalling; the
        store is bound to it (a store of another embedder is refused), and it is
        wrapped in a cache so that identical text is never embedded twice.
    """

    def __init__(self, store: Store, embedder: Embedder, scope: Scope, **options: Any) -> None:
        super().__init__(store, scope, **options)
        self.embedder = cached(embedder)
        store.bind_vector_space(VectorSpace(self.embedder.name, self.embedder.dim))
        self.recall_block = VectorBlock(
            store,
            self.embedder,
            self.policy.recall_scope(scope),
            self.policy.limit,
            mode=self.policy.recall_mode,
            hybrid=self.policy.hybrid,
        )

    @property
    def recall_scope(self) -> Scope:
        return self.recall_block.scope

    async def _embed_ahead(self, texts: list[str]) -> None:
        # On the model's worker, into the cache, where the sync logic then finds them.
        if texts:
            await self.embedder.aembed(texts)

    async def _embed_query_ahead(self, query: str | None) -> None:
        if isinstance(query, str) and query.strip() and self.recall_block.mode != "keyword":
            await self.embedder.aembed([query])

    def _store_records(self, records: Sequence[MemoryRecord]) -> None:
        self.recall_block.write_records(records)

    def _vector_of(self, text: str) -> Matrix | None:
        if not isinstance(text, str) or not text.strip():
            return None  # the store refuses what needs refusing; blank text has no vector
        return self.embedder.embed([text])

    def _similar_note(self, message: Message, vector: Matrix | None) -> MemoryRecord | None:
        if vector is None:
            return None
        hits = self.store.search(
            self.recall_scope, vector=vector[0], filter={"kind": NOTE_KIND, "role": message.role}, limit=10
        )
        owner = self.scope.as_tuple()[:3]
        threshold = self.policy.consolidation_threshold
        for hit in hits:
            record = hit.record
            if hit.score < threshold:
                break
            if record.message.name == message.name and record.scope.as_tuple()[:3] == owner:
                return record
        return None

    def _refreshed(self, hits: list[ContextRecord]) -> list[ContextRecord]:
        """``hits``, after those that expire were given ``policy.ttl`` more from now, never less
        than they had (``refresh_on_read``; :meth:`memcore.store.BaseStore.refresh`)."""
        ttl = self.policy.ttl
        expiring = [hit.record.id for hit in hits if hit.record.expires_at is not None]
        if self.policy.refresh_on_read and ttl is not None and expiring:
            self.store.refresh(self.recall_scope, expiring, ttl)
        return hits

    def _latest_user_message(self, window: Sequence[ContextRecord] = ()) -> str | None:
        for item in reversed(window):
            if item.record.message.role == "user" and item.record.message.content.strip():
                return item.record.message.content
        for scope in dict.fromkeys([self.scope, self.recall_scope]):
            for record in self.store.list(scope, filter={"role": "user"}, order="desc", limit=5):
                if record.message.content.strip():
                    return record.message.content
        return None

    def _recall(self, query: str | None, exclude: Collection[RecordKey] = ()) -> list[ContextRecord]:
        """Up to ``policy.limit`` hits for ``query`` whose keys are not in ``exclude``, best first."""
        if query is None or not query.strip():
            return []
        note_query(query)
        hits = self.recall_block.retrieve(query, filter=RECALL_FILTER, limit=self.policy.limit + len(exclude))
        kept = [h for h in hits if h.record.key not in exclude and not h.record.message.tool_calls]
        return self._refreshed(kept[: self.policy.limit])

    def _note_if_empty(self, hits: list[ContextRecord]) -> list[ContextRecord]:
        if hits or not self.policy.inject_when_empty:
            return hits
        note = MemoryRecord(scope=self.scope, message=Message(role="system", content=NO_MEMORIES_NOTE))
        return [ContextRecord(record=note, score=0.0, source="recall")]

    @memory_operation("search_memory")
    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """Records similar to ``query`` (default: the latest user message in the store), best first."""
        return self._note_if_empty(self._recall(query if query is not None else self._latest_user_message()))


class LongtermMemory(VectorMemory):
    """Recall and the recent window together (see the module docstring for the order).

    :param window: how many recent records of the memory's own scope the context holds.
    """

    def __init__(
        self, store: Store, embedder: Embedder, scope: Scope, *, window: int = 20, **options: Any
    ) -> None:
        super().__init__(store, embedder, scope, **options)
        self.history = ChatHistoryBlock(store, scope.exact(), window)

    @memory_operation("search_memory")
    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """``[system] + recalled records not in the window (oldest first) + the window``."""
        window = self.history.retrieve()
        pinned = window[:1] if window and window[0].record.message.role in PINNED_ROLES else []
        in_window = {item.record.key for item in window}
        hits = self._recall(query if query is not None else self._latest_user_message(window), in_window)
        hits.sort(key=lambda hit: hit.record.created_at)
        return pinned + self._note_if_empty(hits) + window[len(pinned) :]
