"""Blocks: the two ways a memory reads records back from one store.

A :class:`ChatHistoryBlock` reads the recent window by time; a
:class:`VectorBlock` recalls by similarity (and/or text). Both read the same
records: a record is written once, with its vector, and one delete removes it
from both. Every read and delete is limited to the block's scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memcore.embedders.base import Embedder
from memcore.errors import InvalidInputError, ScopeError
from memcore.filters import Filter, FilterSpec
from memcore.records import ContextRecord, MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store

PINNED_ROLES = ("system", "developer")
"""The roles of the message pinned at the top of the history (its first one)."""


def embedding_text(message: Message) -> str:
    """The text that stands for a message in vector search: its content, else its tool calls."""
    if message.content.strip() or not message.tool_calls:
        return message.content
    return " ".join(f"{call.function.name} {call.function.arguments}" for call in message.tool_calls)


def check_in_scope(scope: Scope, records: Sequence[MemoryRecord]) -> None:
    """Refuse records that ``scope`` could not read back (a write outside the memory's scope)."""
    for record in records:
        if not scope.matches(record.scope):
            raise ScopeError(
                f"record {record.id} has scope {record.scope}, outside this memory's scope {scope}"
            )


class MemoryBlock(Protocol):
    """Stores records and retrieves them as context, within one scope."""

    scope: Scope

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store records (each must lie within the block's scope)."""
        ...

    def clear(self) -> int:
        """Delete every record of the block's scope, and nothing else; return how many."""
        ...


class ChatHistoryBlock:
    """The recent window of a conversation, by time.

    :param store: where the records live.
    :param scope: what the block reads, writes and clears.
    :param window: how many of the most recent records :meth:`retrieve` returns.
    """

    def __init__(self, store: Store, scope: Scope, window: int = 20) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InvalidInputError(f"window must be a positive integer, got {window!r}")
        self.store, self.scope, self.window = store, scope, window

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store records without vectors (history is read by time only)."""
        check_in_scope(self.scope, records)
        self.store.add(records)

    def retrieve(self, window: int | None = None) -> list[ContextRecord]:
        """The last ``window`` records in time order, after the pinned system message.

        The first system or developer message of the scope is pinned: it leads the
        result even when it has fallen out of the window. Scores are 1.0.
        """
        recent = self.store.list(self.scope, order="desc", limit=window or self.window)[::-1]
        pinned = self.store.list(self.scope, filter={"role": {"$in": list(PINNED_ROLES)}}, limit=1)
        if pinned and all(record.id != pinned[0].id for record in recent):
            recent.insert(0, pinned[0])
        return [ContextRecord(record=record, score=1.0, source="history") for record in recent]

    def clear(self) -> int:
        """Delete every record of the block's scope; return how many."""
        return self.store.delete_where(self.scope, {})


class VectorBlock:
    """Recall by similarity to a query, over every record of the scope that has a vector.

    :param store: where the records live (bound to ``embedder``'s vector space).
    :param embedder: turns messages and queries into vectors.
    :param scope: what the block reads, writes and clears.
    :param recall_limit: how many hits :meth:`retrieve` returns by default.
    """

    def __init__(self, store: Store, embedder: Embedder, scope: Scope, recall_limit: int = 5) -> None:
        if isinstance(recall_limit, bool) or not isinstance(recall_limit, int) or recall_limit < 1:
            raise InvalidInputError(f"recall_limit must be a positive integer, got {recall_limit!r}")
        self.store, self.embedder, self.scope, self.recall_limit = store, embedder, scope, recall_limit

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Embed the records in one batch and store them with their vectors."""
        check_in_scope(self.scope, records)
        if records:
            self.store.add(records, self.embedder.embed([embedding_text(r.message) for r in records]))

    def retrieve(
        self, query: str, *, limit: int | None = None, filter: FilterSpec | Filter | None = None
    ) -> list[ContextRecord]:
        """The records most similar to ``query``, best first, scored by cosine similarity."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"a recall query is a non-empty string, got {query!r}")
        [vector] = self.embedder.embed([query])
        hits = self.store.search(self.scope, vector=vector, filter=filter, limit=limit or self.recall_limit)
        return [ContextRecord(record=hit.record, score=hit.score, source="recall") for hit in hits]

    def clear(self) -> int:
        """Delete every record of the block's scope; return how many."""
        return self.store.delete_where(self.scope, {})
