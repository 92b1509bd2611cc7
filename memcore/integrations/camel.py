"""CAMEL's ``AgentMemory`` over a memcore store (``memcore[camel]``).

    model = ModelFactory.create(model_platform=..., model_type=...)
    scope = Scope(tenant="acme", user_id="u1", agent_id="planner", session_id="s1")
    memory = CamelMemory(store, embedder, scope, token_counter=model.token_counter, token_limit=4_000)
    agent = ChatAgent("You plan trips.", model=model, memory=memory, agent_id="planner")

It keeps CAMEL's method names and record shapes (``write_records`` takes CAMEL
``MemoryRecord``s, ``retrieve`` returns CAMEL ``ContextRecord``s, each record's
``uuid`` is its memcore id), and fixes what CAMEL's own memories get wrong:

* **scoped to one agent**: every read, write and delete goes through the scope of a
  :class:`~memcore.memories.LongtermMemory`, which names the agent. A ChatAgent
  whose ``agent_id`` is another agent's, or a record of another agent, is refused
  (:class:`~memcore.errors.ScopeError`), so two agents sharing a store never see
  or delete each other's records;
* **clear() is scoped**: CAMEL calls it when a ChatAgent is created or reset and
  when its ``memory`` is replaced; it empties this agent's current session and
  nothing else (earlier sessions stay recallable);
* **deleting one record reaches recall**: :meth:`forget`, :meth:`pop_records` and
  :meth:`remove_records_by_indices` delete from the store, so the record leaves
  the history and the vector recall at once;
* **the token limit is enforced**: the context is fitted by memcore's budgeted
  context creator, counting with the model's own token counter (CAMEL's
  ``ScoreBasedContextCreator`` no longer trims anything).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np

try:
    from camel.memories import AgentMemory as _CamelAgentMemory
    from camel.memories import BaseContextCreator
    from camel.memories import ContextRecord as CamelContextRecord
    from camel.memories import MemoryRecord as CamelRecord
    from camel.messages import BaseMessage
    from camel.types import OpenAIBackendRole, RoleType
    from camel.utils import BaseTokenCounter
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("memcore.integrations.camel needs camel-ai: pip install 'memcore[camel]'") from exc

from memcore.context import ScoreBasedContextCreator
from memcore.embedders.base import Embedder
from memcore.errors import InvalidInputError, ScopeError
from memcore.memories import LongtermMemory
from memcore.records import ContextRecord, MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.validation import Matrix

CAMEL_RECORD_KEY = "camel_record"
"""The metadata key that keeps a record's CAMEL form (JSON), so it comes back as it was written."""

_ROLES = {
    "system": OpenAIBackendRole.SYSTEM,
    "developer": OpenAIBackendRole.DEVELOPER,
    "user": OpenAIBackendRole.USER,
    "assistant": OpenAIBackendRole.ASSISTANT,
    "tool": OpenAIBackendRole.TOOL,
}
_MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


class CamelTokenCounter:
    """A memcore :class:`~memcore.tokens.TokenCounter` that counts with a CAMEL model's counter."""

    def __init__(self, counter: BaseTokenCounter) -> None:
        self.counter = counter

    def count(self, messages: Sequence[Message]) -> int:
        """The tokens of a prompt of ``messages``, as the CAMEL counter counts them."""
        prompt: Any = [message.to_openai() for message in messages]
        return int(self.counter.count_tokens_from_messages(prompt))


class CamelMemory(_CamelAgentMemory):
    """A CAMEL agent memory whose records live in a memcore store, within one agent's scope.

    :param store: any memcore store.
    :param embedder: embeds records for recall.
    :param scope: the agent's scope; it must name the agent (``agent_id``), and
        usually the session (recall reaches the agent's other sessions).
    :param token_counter: the model's counter (``model.token_counter``).
    :param token_limit: the most tokens :meth:`get_context` may return.
    :param options: passed to :class:`~memcore.memories.LongtermMemory` (``window``, ``policy``).
    """

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        scope: Scope,
        *,
        token_counter: BaseTokenCounter,
        token_limit: int,
        **options: Any,
    ) -> None:
        if scope.agent_id is None:
            raise ScopeError("a CAMEL memory belongs to one agent: give its scope an agent_id")
        self.token_counter = token_counter
        self._cleared: dict[UUID, tuple[MemoryRecord, Matrix | None]] = {}
        self.memory = LongtermMemory(
            store,
            embedder,
            scope,
            token_limit=token_limit,
            context_creator=ScoreBasedContextCreator(CamelTokenCounter(token_counter)),
            **options,
        )

    @property
    def agent_id(self) -> str | None:
        """The agent this memory belongs to (from its scope)."""
        return self.memory.scope.agent_id

    @agent_id.setter
    def agent_id(self, value: str | None) -> None:
        # ChatAgent sets it to its own agent_id: another agent's memory is refused, not relabelled.
        if value is not None and value != self.agent_id:
            raise ScopeError(
                f"this memory belongs to agent {self.agent_id!r}, not {value!r}: "
                f"create the ChatAgent with agent_id={self.agent_id!r}"
            )

    @property
    def token_limit(self) -> int:
        """The most tokens :meth:`get_context` returns."""
        return self.memory.token_limit

    def write_records(self, records: list[CamelRecord]) -> None:
        """Store CAMEL records in the agent's scope (each keeps its ``uuid`` as memcore id).

        A record the agent already remembers from another session (recalled, then
        written back by ChatAgent's ``memory`` setter) stays where it is.

        :raises ScopeError: for a record of another agent; if it follows a
            :meth:`clear`, what that clear deleted and was not written back is restored
            first (ChatAgent's ``memory`` setter clears before it writes).
        """
        try:
            converted = [self._to_memcore(record) for record in records]
        except ScopeError:
            self._restore_cleared()
            raise
        stored = self.memory.store.get(self.memory.recall_scope, [r.id for r in converted])
        remembered = {r.id: r for r in stored} | {i: record for i, (record, _) in self._cleared.items()}
        fresh = [
            # Written again (ChatAgent's setter does): its place in time stays the same.
            r.model_copy(update={"created_at": remembered[r.id].created_at}) if r.id in remembered else r
            for r in converted
            if r.id not in remembered or remembered[r.id].scope == r.scope
        ]
        self.memory.write_records(fresh)
        if self._cleared and any(r.id not in self._cleared for r in fresh):
            self._cleared = {}  # a new write after the clear: the clear stands

    def retrieve(self) -> list[CamelContextRecord]:
        """The system message, recalled records and the recent window, as CAMEL context records."""
        return [_to_camel_context(item) for item in self.memory.retrieve()]

    def get_context(self) -> tuple[list[Any], int]:
        """The messages for the next model call and their token count, within :attr:`token_limit`."""
        return self.memory.get_context()

    def get_context_creator(self) -> BaseContextCreator:
        """A CAMEL context creator that enforces this memory's token limit."""
        return _BudgetedContextCreator(self)

    def clear(self) -> None:
        """Delete the records of this agent's current session (its scope), and nothing else."""
        history = self._history()
        vectors = self.memory.store.vectors(self.memory.scope, [r.id for r in history])
        self.memory.clear()
        self._cleared = {r.id: (r, vectors.get(r.id)) for r in history}

    def _restore_cleared(self) -> None:
        """Write back what the last :meth:`clear` deleted and nothing has written since."""
        cleared, self._cleared = self._cleared, {}
        present = {r.id for r in self.memory.store.get(self.memory.scope, list(cleared))}
        missing = [entry for record_id, entry in cleared.items() if record_id not in present]
        with_vectors = [(record, vector) for record, vector in missing if vector is not None]
        if with_vectors:
            self.memory.store.add([r for r, _ in with_vectors], np.stack([v for _, v in with_vectors]))
        without = [record for record, vector in missing if vector is None]
        if without:
            self.memory.store.add(without)

    def forget(self, ids: Sequence[UUID | str]) -> int:
        """Delete these records from the store, history and recall alike; return how many."""
        return self.memory.forget(ids)

    def pop_records(self, count: int) -> list[CamelRecord]:
        """Delete the ``count`` newest records of the session (never its first system message).

        :returns: the deleted records, oldest first.
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInputError(f"count must be a non-negative integer, got {count!r}")
        history = self._history()
        chosen = (
            history[len(history) - min(count, len(history) - self._protected(history)) :] if count else []
        )
        return self._delete(chosen)

    def remove_records_by_indices(self, indices: list[int]) -> list[CamelRecord]:
        """Delete the session's records at these positions (oldest first, as CAMEL's history counts).

        :returns: the deleted records, oldest first.
        """
        history = self._history()
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(history) for i in indices):
            raise InvalidInputError(f"indices must be positions in a history of {len(history)}: {indices!r}")
        return self._delete([history[i] for i in sorted(set(indices))])

    def _history(self) -> list[MemoryRecord]:
        return self.memory.store.list(self.memory.scope)

    @staticmethod
    def _protected(history: list[MemoryRecord]) -> int:
        return int(bool(history) and history[0].message.role in ("system", "developer"))

    def _delete(self, records: list[MemoryRecord]) -> list[CamelRecord]:
        self.memory.forget([record.id for record in records])
        return [to_camel(record) for record in records]

    def _to_memcore(self, record: CamelRecord) -> MemoryRecord:
        if record.agent_id and record.agent_id != self.agent_id:
            raise ScopeError(
                f"a record of agent {record.agent_id!r} cannot go into {self.agent_id!r}'s memory"
            )
        return to_memcore(record, self.memory.scope)


class _BudgetedContextCreator(BaseContextCreator):
    """CAMEL's context-creator interface over memcore's, which enforces the token limit."""

    def __init__(self, memory: CamelMemory) -> None:
        self._memory = memory

    @property
    def token_counter(self) -> BaseTokenCounter:
        return self._memory.token_counter

    @property
    def token_limit(self) -> int:
        return self._memory.token_limit

    def create_context(self, records: list[CamelContextRecord]) -> tuple[list[Any], int]:
        scope = self._memory.memory.scope
        items = [
            ContextRecord(record=to_memcore(r.memory_record, scope), score=r.score, source="history")
            for r in records
        ]
        return self._memory.memory.context_creator.create_context(items, self.token_limit)


def to_memcore(record: CamelRecord, scope: Scope) -> MemoryRecord:
    """A CAMEL record as a memcore record of ``scope`` with the same id (its CAMEL form kept)."""
    openai = dict(record.to_openai_message())
    content = openai.get("content")
    if isinstance(content, list):  # multimodal parts: keep the text
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    openai["content"] = content or ""
    message = Message.model_validate({k: v for k, v in openai.items() if k in _MESSAGE_FIELDS})
    return MemoryRecord(
        id=record.uuid,
        scope=scope,
        message=message,
        metadata={CAMEL_RECORD_KEY: json.dumps(record.to_dict(), default=str)},
    )


def to_camel(record: MemoryRecord) -> CamelRecord:
    """A memcore record as a CAMEL record: as it was written through CAMEL, else made from its message."""
    kept = record.metadata.get(CAMEL_RECORD_KEY)
    if isinstance(kept, str):
        return CamelRecord.from_dict(json.loads(kept))
    message = record.message
    role_type = {"user": RoleType.USER, "assistant": RoleType.ASSISTANT}.get(message.role, RoleType.DEFAULT)
    return CamelRecord(
        message=BaseMessage(
            role_name=message.name or message.role,
            role_type=role_type,
            meta_dict=None,
            content=message.content,
        ),
        role_at_backend=_ROLES[message.role],
        uuid=record.id,
        timestamp=record.created_at.timestamp(),
        agent_id=record.scope.agent_id or "",
    )


def _to_camel_context(item: ContextRecord) -> CamelContextRecord:
    # CAMEL orders context by this timestamp: memcore's order (created_at), not "now".
    timestamp = datetime.timestamp(item.record.created_at)
    return CamelContextRecord(memory_record=to_camel(item.record), score=item.score, timestamp=timestamp)


__all__ = ["CAMEL_RECORD_KEY", "CamelMemory", "CamelTokenCounter", "to_camel", "to_memcore"]
