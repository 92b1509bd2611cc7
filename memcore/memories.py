"""Agent memories: what to write, what to recall, and the context a model sees.

* :class:`ChatHistoryMemory`: the recent window of one conversation.
* :class:`VectorMemory`: recall by similarity to a query.
* :class:`LongtermMemory`: both. Its context is, in this order:

  1. the first system (or developer) message of the conversation, pinned;
  2. recalled records that are not already in the recent window (deduplicated
     by id), oldest first;
  3. the recent window, in time order.

Every memory writes into its own :class:`~memcore.scope.Scope` and reads within
it (recall within the wider scope its :class:`~memcore.policy.MemoryPolicy`
allows). A record is written once, with its vector; ``forget`` deletes it by id
from the store, so it disappears from history and recall alike.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from memcore.blocks import PINNED_ROLES, ChatHistoryBlock, VectorBlock, check_in_scope
from memcore.context import ContextCreator, ScoreBasedContextCreator
from memcore.embedders.base import Embedder
from memcore.embedders.cache import cached
from memcore.errors import InvalidInputError
from memcore.filters import Filter, FilterSpec
from memcore.policy import MemoryPolicy
from memcore.records import ContextRecord, MemoryRecord, Message, MetadataValue, utc_now
from memcore.scope import Scope
from memcore.store import Store, VectorSpace

DEFAULT_TOKEN_LIMIT = 4_096
NO_MEMORIES_NOTE = "No relevant memories were found for this conversation."


class WriteBuffer:
    """Writes of one task, held back until the memory's :meth:`AgentMemory.barrier`.

    Use it as a context manager around the task: if the task raises, the buffer
    is discarded. Readers never see buffered records before the barrier.
    """

    def __init__(self, memory: AgentMemory) -> None:
        self._memory = memory
        self._messages: list[tuple[Message, str, dict[str, MetadataValue]]] = []
        self.discarded = False

    def write(
        self,
        messages: Sequence[Message],
        *,
        kind: str = "turn",
        metadata: dict[str, MetadataValue] | None = None,
    ) -> None:
        """Buffer messages; they become records of the memory's scope at the barrier."""
        if self.discarded:
            raise InvalidInputError("this buffer was discarded; its task failed")
        self._messages.extend((message, kind, dict(metadata or {})) for message in messages)

    def discard(self) -> None:
        """Drop everything buffered; the barrier will write nothing of this buffer."""
        self.discarded = True
        self._messages.clear()

    def take(self) -> list[tuple[Message, str, dict[str, MetadataValue]]]:
        """Hand over the buffered messages (the barrier calls this)."""
        taken, self._messages = self._messages, []
        return taken

    def __enter__(self) -> WriteBuffer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is not None:
            self.discard()


class AgentMemory(ABC):
    """What every memory offers: write, retrieve, get_context, forget, clear.

    :param store: where the records live.
    :param scope: the memory's own scope: records are written into it, and
        :meth:`clear` empties exactly it.
    :param token_limit: the default budget of :meth:`get_context`.
    :param context_creator: fits records into the budget (default: drops the
        lowest-scored first).
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
        self.store, self.scope, self.token_limit = store, scope, token_limit
        self.context_creator = context_creator or ScoreBasedContextCreator()
        self.policy = policy or MemoryPolicy()
        self._buffers: list[WriteBuffer] = []
        self._buffers_lock = threading.Lock()

    @property
    def read_scope(self) -> Scope:
        """The widest scope the memory reads and forgets in."""
        return self.scope

    @abstractmethod
    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store records of the memory's scope, once each."""

    @abstractmethod
    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """The records for the next model call, in the order the context lists them."""

    def write(
        self,
        messages: Sequence[Message],
        *,
        kind: str = "turn",
        metadata: dict[str, MetadataValue] | None = None,
    ) -> list[MemoryRecord]:
        """Store messages as records of the memory's scope; return the records."""
        records = [
            MemoryRecord(scope=self.scope, message=message, kind=kind, metadata=dict(metadata or {}))
            for message in messages
        ]
        self.write_records(records)
        return records

    def observe(self, messages: Sequence[Message]) -> list[MemoryRecord]:
        """Store the turns an agent loop shows the memory, if the policy auto-saves."""
        return self.write(messages) if self.policy.auto_save else []

    def get_context(
        self, token_limit: int | None = None, *, query: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """The messages for the next model call and their token count, within ``token_limit``."""
        records = [self._shorten(r) if r.source == "recall" else r for r in self.retrieve(query)]
        return self.context_creator.create_context(
            records, self.token_limit if token_limit is None else token_limit
        )

    def _shorten(self, item: ContextRecord) -> ContextRecord:
        message = item.record.message
        if len(message.content) <= self.policy.max_chars:
            return item
        cut = message.model_copy(update={"content": message.content[: self.policy.max_chars] + "…"})
        return item.model_copy(update={"record": item.record.model_copy(update={"message": cut})})

    def forget(self, ids: Sequence[UUID | str]) -> int:
        """Delete these records (within :attr:`read_scope`) from the store: history and recall alike."""
        return self.store.delete(self.read_scope, ids)

    def forget_where(self, filter: FilterSpec | Filter) -> int:
        """Delete every record within :attr:`read_scope` that matches ``filter``."""
        return self.store.delete_where(self.read_scope, filter)

    def clear(self) -> int:
        """Delete every record of the memory's own scope, and nothing else."""
        return self.store.delete_where(self.scope, {})

    def buffer(self) -> WriteBuffer:
        """A buffer for one parallel task's writes; :meth:`barrier` commits it.

        Buffers are committed in the order they were created here (their
        declaration order), whatever order the tasks finish in.
        """
        created = WriteBuffer(self)
        with self._buffers_lock:
            self._buffers.append(created)
        return created

    def barrier(self) -> list[MemoryRecord]:
        """Commit every pending buffer in declaration order; discarded buffers write nothing.

        All buffered messages are written in one batch (one embedding call),
        stamped in declaration order so that history reads them in that order.
        """
        with self._buffers_lock:
            pending, self._buffers = self._buffers, []
        records = [
            MemoryRecord(
                scope=self.scope, message=message, kind=kind, metadata=metadata, created_at=utc_now()
            )
            for buffer in pending
            for message, kind, metadata in buffer.take()
        ]
        if records:
            self.write_records(records)
        return records

    def _latest_user_message(self) -> str | None:
        for scope in dict.fromkeys([self.scope, self.read_scope]):
            for record in self.store.list(scope, filter={"role": "user"}, order="desc", limit=5):
                if record.message.content.strip():
                    return record.message.content
        return None


class ChatHistoryMemory(AgentMemory):
    """The recent window of one conversation, with its system message pinned.

    :param window: how many recent records the context holds.
    """

    def __init__(self, store: Store, scope: Scope, *, window: int = 20, **options: Any) -> None:
        super().__init__(store, scope, **options)
        self.history = ChatHistoryBlock(store, scope, window)

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        self.history.write_records(records)

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
        self.recall = VectorBlock(store, self.embedder, self.policy.recall_scope(scope), self.policy.limit)

    @property
    def read_scope(self) -> Scope:
        return self.recall.scope

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        check_in_scope(self.scope, records)
        self.recall.write_records(records)

    def _recall(self, query: str | None) -> list[ContextRecord]:
        query = query if query is not None else self._latest_user_message()
        if query is None or not query.strip():
            return []
        return self.recall.retrieve(query, filter={"role": {"$nin": list(PINNED_ROLES)}})

    def _note_if_empty(self, hits: list[ContextRecord]) -> list[ContextRecord]:
        if hits or not self.policy.inject_when_empty:
            return hits
        note = MemoryRecord(scope=self.scope, message=Message(role="system", content=NO_MEMORIES_NOTE))
        return [ContextRecord(record=note, score=0.0, source="recall")]

    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """Records similar to ``query`` (default: the latest user message in the store), best first."""
        return self._note_if_empty(self._recall(query))


class LongtermMemory(VectorMemory):
    """Recall and the recent window together (see the module docstring for the order).

    :param window: how many recent records of the memory's own scope the context holds.
    """

    def __init__(
        self, store: Store, embedder: Embedder, scope: Scope, *, window: int = 20, **options: Any
    ) -> None:
        super().__init__(store, embedder, scope, **options)
        self.history = ChatHistoryBlock(store, scope, window)

    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """``[system] + recalled records not in the window (oldest first) + the window``."""
        window = self.history.retrieve()
        pinned = window[:1] if window and window[0].record.message.role in PINNED_ROLES else []
        in_window = {item.record.id for item in window}
        hits = [hit for hit in self._recall(query) if hit.record.id not in in_window]
        hits.sort(key=lambda hit: hit.record.created_at)
        return pinned + self._note_if_empty(hits) + window[len(pinned) :]
