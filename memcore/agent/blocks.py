"""Blocks: the two ways a memory reads records back from one store.

A :class:`ChatHistoryBlock` reads the recent window by time; a
:class:`VectorBlock` recalls by similarity (and/or text). Both read the same
records: a record is written once, with its vector, and one delete removes it
from both. Every read and delete is limited to the block's scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memcore.agent.recall import HybridRecall, RecallMode, hybrid_search, resolved_mode
from memcore.embedders.base import Embedder, OffLoopEmbedding
from memcore.errors import InvalidInputError, ScopeError
from memcore.filters import Filter, FilterSpec, parse_filter
from memcore.records import SUMMARY_KIND, ContextRecord, MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.validation import Vector

PINNED_ROLES = ("system", "developer")
"""The roles of the message pinned at the top of the history (its first one)."""

TOOL_UNIT_LOOKBACK = 8
"""How many records before the window the history reads to keep a tool call with its results."""


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


def check_positive(name: str, value: int) -> int:
    """Refuse a count that is not a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
    return value


class MemoryBlock(Protocol):
    """Stores records and retrieves them as context, within one scope."""

    scope: Scope

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store records (each must lie within the block's scope)."""
        ...

    def retrieve(self, query: str | None = None) -> list[ContextRecord]:
        """The block's records for the next model call (``query`` where the block uses one)."""
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
        self.store, self.scope, self.window = store, scope, check_positive("window", window)

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store records without vectors (history is read by time only)."""
        check_in_scope(self.scope, records)
        self.store.add(records)

    def recent(self, window: int | None = None) -> list[MemoryRecord]:
        """The last ``window`` records in time order, reaching back to keep tool calls with their results.

        When the window would open on a tool result, up to
        :data:`TOOL_UNIT_LOOKBACK` earlier records are added until it opens on
        the assistant message that made the call.
        """
        size = window or self.window
        newest_first = self.store.list(self.scope, order="desc", limit=size + TOOL_UNIT_LOOKBACK)
        start = min(size, len(newest_first))
        while start < len(newest_first) and newest_first[start - 1].message.role == "tool":
            start += 1
        return newest_first[:start][::-1]

    def pinned(self) -> MemoryRecord | None:
        """The first system or developer message of the scope (summaries excluded), if any."""
        spec: FilterSpec = {"role": {"$in": list(PINNED_ROLES)}, "kind": {"$ne": SUMMARY_KIND}}
        found = self.store.list(self.scope, filter=spec, limit=1)
        return found[0] if found else None

    def retrieve(self, query: str | None = None, *, window: int | None = None) -> list[ContextRecord]:
        """The pinned system message, then the recent window in time order; ``query`` is not used.

        The first system or developer message of the scope leads even when it has
        fallen out of the window. Window records are scored by recency, from
        1/len(window) (oldest) to 1.0 (newest), so that a score-based context
        creator gives up old turns before it gives up well-matched recalled records.
        """
        recent = self.recent(window)
        pinned = self.pinned()
        items = []
        if pinned is not None and all(record.id != pinned.id for record in recent):
            items.append(ContextRecord(record=pinned, score=1.0, source="history"))
        for rank, record in enumerate(recent, start=1):
            items.append(ContextRecord(record=record, score=rank / len(recent), source="history"))
        return items

    def clear(self) -> int:
        """Delete every record of the block's scope; return how many."""
        return self.store.delete_where(self.scope, {})


class VectorBlock:
    """Recall by similarity to a query, and/or by text, over every record of the scope.

    :param store: where the records live (bound to ``embedder``'s vector space).
    :param embedder: turns messages and queries into vectors.
    :param scope: what the block reads, writes and clears.
    :param recall_limit: how many hits :meth:`retrieve` returns by default.
    :param mode: how a query is matched: ``"dense"`` (vector similarity), ``"keyword"`` (BM25),
        ``"hybrid"`` (both, fused and smoothed along sessions: :mod:`memcore.agent.recall`), or
        ``"auto"`` (default): the store's ``capabilities.default_recall`` (hybrid in the built-in
        stores, dense in those where hybrid recall's extra reads are slow).
    :param hybrid: the settings of hybrid recall.
    """

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        scope: Scope,
        recall_limit: int = 5,
        *,
        mode: RecallMode = "auto",
        hybrid: HybridRecall | None = None,
    ) -> None:
        self.store, self.embedder, self.scope = store, embedder, scope
        self.recall_limit = check_positive("recall_limit", recall_limit)
        if mode not in ("auto", "dense", "keyword", "hybrid"):
            raise InvalidInputError(
                f"recall mode must be 'auto', 'dense', 'keyword' or 'hybrid', got {mode!r}"
            )
        self.mode = resolved_mode(mode, store)
        self.hybrid = hybrid if hybrid is not None else HybridRecall()

    def write_records(self, records: Sequence[MemoryRecord]) -> None:
        """Embed the records in one batch and store them with their vectors."""
        check_in_scope(self.scope, records)
        if records:
            self.store.add(records, self.embedder.embed([embedding_text(r.message) for r in records]))

    def retrieve(
        self,
        query: str | None = None,
        *,
        text: str | None = None,
        limit: int | None = None,
        filter: FilterSpec | Filter | None = None,
    ) -> list[ContextRecord]:
        """The records that best match ``query`` by the block's mode, among those containing ``text``.

        With ``text`` alone: the newest records containing it (score 1.0). With
        ``text`` and a query, the query is matched by vector similarity whatever the mode.

        :raises InvalidInputError: if neither ``query`` nor ``text`` is a non-empty string.
        """
        needed = self._needs_vector(query, text)
        vector = self.embedder.embed([query])[0] if needed and query is not None else None
        return self._retrieve(query, vector, text, limit, filter)

    async def aretrieve(
        self,
        query: str | None = None,
        *,
        text: str | None = None,
        limit: int | None = None,
        filter: FilterSpec | Filter | None = None,
    ) -> list[ContextRecord]:
        """:meth:`retrieve`, awaited: the query embedded through the embedder's async API (off the
        event loop, batched with other callers') where it has one, the store's reads on its workers."""
        needed = self._needs_vector(query, text)
        if not (needed and query is not None and isinstance(self.embedder, OffLoopEmbedding)):
            return await self.store.run_in_worker(self.retrieve, query, text=text, limit=limit, filter=filter)
        vector = (await self.embedder.aembed([query]))[0]
        return await self.store.run_in_worker(self._retrieve, query, vector, text, limit, filter)

    def _needs_vector(self, query: str | None, text: str | None) -> bool:
        """Whether the query is matched by vector (checking the arguments first).

        :raises InvalidInputError: if neither ``query`` nor ``text`` is a non-empty string.
        """
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise InvalidInputError(f"a recall query is a non-empty string, got {query!r}")
        if query is None and text is None:
            raise InvalidInputError("recall needs a query, a text, or both")
        return query is not None and not (text is None and self.mode == "keyword")

    def _retrieve(
        self,
        query: str | None,
        vector: Vector | None,
        text: str | None,
        limit: int | None,
        filter: FilterSpec | Filter | None,
    ) -> list[ContextRecord]:
        limit = limit or self.recall_limit
        if query is not None and text is None and self.mode == "keyword":
            hits = self.store.search(self.scope, keywords=query, filter=filter, limit=limit)
        elif query is not None and vector is not None and text is None and self.mode == "hybrid":
            hits = hybrid_search(
                self.store,
                self.scope,
                vector=vector,
                keywords=query,
                filter=parse_filter(filter),
                limit=limit,
                settings=self.hybrid,
            )
        else:
            hits = self.store.search(self.scope, vector=vector, text=text, filter=filter, limit=limit)
        return [ContextRecord(record=hit.record, score=hit.score, source="recall") for hit in hits]

    def clear(self) -> int:
        """Delete every record of the block's scope; return how many."""
        return self.store.delete_where(self.scope, {})
