"""CAMEL's ``AgentMemory`` over a memcore store (``memcore[camel]``).

    model = ModelFactory.create(model_platform=..., model_type=...)
    scope = Scope(tenant="acme", user_id="u1", agent_id="planner", session_id="s1")
    memory = CamelMemory(store, embedder, scope, token_counter=model.token_counter, token_limit=4_000)
    agent = ChatAgent("You plan trips.", model=model, memory=memory, agent_id="planner")

It keeps CAMEL's method names and record shapes (``write_records`` takes CAMEL
``MemoryRecord``s, ``retrieve`` returns CAMEL ``ContextRecord``s, each record's
``uuid`` is its memcore id), and fixes what CAMEL's own memories get wrong:

* **scoped to one agent**: every read, write and delete goes through the scope of a
  :class:`~memcore.agent.memories.LongtermMemory`, which names the agent. A ChatAgent
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
from typing import Any
from uuid import UUID

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

from memcore.agent.context import ScoreBasedContextCreator
from memcore.agent.memories import NO_MEMORIES_NOTE, LongtermMemory
from memcore.embedders.base import Embedder
from memcore.errors import InvalidInputError, ScopeError
from memcore.records import ContextRecord, MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store
from memcore.transfer import add_entries
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
_INSTRUCTION_ROLES = ("system", "developer")


class CamelTokenCounter:
    """A memcore :class:`~memcore.agent.tokens.TokenCounter` that counts with a CAMEL model's counter."""

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
    :param options: passed to :class:`~memcore.agent.memories.LongtermMemory` (``window``, ``policy``).
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
        self._refused = False
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

        A record already stored keeps its place in time; one the agent remembers from
        another session (recalled, then written back) stays there; a system message the
        session already holds is not written twice.

        :raises ScopeError: for a record of another agent. Reads are then refused
            too, until a write of this agent succeeds (see :meth:`clear`).
        """
        try:
            converted = [self._to_memcore(record) for record in records]
        except ScopeError:
            self._refused = True
            self._undo_clear()
            raise
        if any(record.id in self._cleared for record in converted):
            self._undo_clear()  # ChatAgent's memory setter writing back what it read
        own: dict[UUID, MemoryRecord] = {}
        elsewhere: set[UUID] = set()
        for found in self.memory.store.get(self.memory.recall_scope, [r.id for r in converted]):
            if found.scope == self.memory.scope:
                own[found.id] = found
            else:
                elsewhere.add(found.id)
        given = self.memory.store.list(
            self.memory.scope.exact(), filter={"role": {"$in": list(_INSTRUCTION_ROLES)}}
        )
        instructions = {r.message.content for r in given}
        fresh = []
        for record in converted:
            known = own.get(record.id)
            if known is None and record.id in elsewhere:
                continue
            if (
                known is None
                and record.message.role in _INSTRUCTION_ROLES
                and record.message.content in instructions
            ):
                continue
            fresh.append(
                record if known is None else record.model_copy(update={"created_at": known.created_at})
            )
        self.memory.write_records(fresh)
        self._refused = False

    def retrieve(self) -> list[CamelContextRecord]:
        """The system message, recalled records and the recent window, as CAMEL context records."""
        self._before_reading()
        # The "no memories" note (policy.inject_when_empty) is for the model, not a record to write back.
        stored = [item for item in self.memory.retrieve() if not _is_note(item)]
        return [_to_camel_context(item) for item in self._one_per_id(stored)]

    def _one_per_id(self, items: list[ContextRecord]) -> list[ContextRecord]:
        """``items`` without recalled namesakes: CAMEL knows a record by its uuid alone.

        A record recalled from another scope that shares its id with a record of this memory's
        own scope (or with an earlier item) is left out; written back, it would overwrite that record.
        """
        own = self.memory.scope
        recalled = [item.record.id for item in items if item.record.scope != own]
        taken = {r.id for r in self.memory.store.get(own.exact(), recalled)} if recalled else set()
        kept: list[ContextRecord] = []
        for item in items:
            if item.record.scope == own or item.record.id not in taken:
                kept.append(item)
                taken.add(item.record.id)
        return kept

    def get_context(self) -> tuple[list[Any], int]:
        """The messages for the next model call and their token count, within :attr:`token_limit`."""
        self._before_reading()
        return self.memory.get_context()

    def get_context_creator(self) -> BaseContextCreator:
        """A CAMEL context creator that enforces this memory's token limit."""
        return _BudgetedContextCreator(self)

    def clear(self) -> None:
        """Delete the records of this agent's current session (its scope), and nothing else.

        CAMEL's ``ChatAgent.memory`` setter reads the memory, clears it and writes
        back what it read; a long-term memory's read is a window, not the whole
        session. So until the next read, a write of a record this clear deleted
        undoes the clear whole (nothing is lost), and so does a refused write of
        another agent's record (that setter handing this memory to another agent).
        """
        history = self._history()
        vectors = self.memory.store.vectors(self.memory.scope.exact(), [r.id for r in history])
        self.memory.clear()
        self._cleared = {r.id: (r, vectors.get(r.id)) for r in history}

    def forget(self, ids: Sequence[UUID | str]) -> int:
        """Delete these records from the store, history and recall alike; return how many."""
        self._cleared = {}
        return self.memory.forget(ids)

    def pop_records(self, count: int) -> list[CamelRecord]:
        """Delete the ``count`` newest records of the session (never its first system message).

        :returns: the deleted records, oldest first.
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInputError(f"count must be a non-negative integer, got {count!r}")
        history = self._history()
        removable = len(history) - self._protected(history)
        return self._delete(history[len(history) - min(count, removable) :] if count else [])

    def remove_records_by_indices(self, indices: list[int]) -> list[CamelRecord]:
        """Delete the session's records at these positions (oldest first, as CAMEL's history counts);
        as CAMEL does, a first system message is kept and positions out of range are ignored.

        :returns: the deleted records, oldest first.
        """
        history = self._history()
        first = self._protected(history)
        chosen = sorted({i for i in indices if isinstance(i, int) and first <= i < len(history)})
        return self._delete([history[i] for i in chosen])

    def _before_reading(self) -> None:
        if self._refused:
            raise ScopeError(
                f"this memory belongs to agent {self.agent_id!r} and refused another agent's records: "
                "it reads again once its own agent writes"
            )
        self._cleared = {}

    def _undo_clear(self) -> None:
        """Write back what the last :meth:`clear` deleted and is not stored again since."""
        cleared, self._cleared = self._cleared, {}
        present = {r.id for r in self.memory.store.get(self.memory.scope.exact(), list(cleared))}
        add_entries(
            self.memory.store, [entry for record_id, entry in cleared.items() if record_id not in present]
        )

    def _history(self) -> list[MemoryRecord]:
        # Exactly the memory's scope: an agent-level memory's history is not its sessions' records.
        return self.memory.store.list(self.memory.scope.exact())

    @staticmethod
    def _protected(history: list[MemoryRecord]) -> int:
        return int(bool(history) and history[0].message.role in _INSTRUCTION_ROLES)

    def _delete(self, records: list[MemoryRecord]) -> list[CamelRecord]:
        # The records are this session's: delete them there, not an id's namesakes elsewhere.
        self._cleared = {}
        self.memory.store.delete(self.memory.scope.exact(), [record.id for record in records])
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
    """A memcore record as a CAMEL record: as it was written through CAMEL, else made from its message.

    The kept CAMEL form is metadata anyone writing the record could set, so which record it is
    (``uuid``), whose (``agent_id``) and its role always come from the record itself; a form that
    does not parse is ignored.
    """
    kept = record.metadata.get(CAMEL_RECORD_KEY)
    if isinstance(kept, str):
        try:
            camel = CamelRecord.from_dict(json.loads(kept))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            camel = None
        if camel is not None:
            camel.uuid = record.id
            camel.agent_id = record.scope.agent_id or ""
            camel.role_at_backend = _ROLES[record.message.role]
            return camel
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


def _is_note(item: ContextRecord) -> bool:
    return item.source == "recall" and item.record.message.content == NO_MEMORIES_NOTE


def _to_camel_context(item: ContextRecord) -> CamelContextRecord:
    # CAMEL orders context by this timestamp: memcore's order (created_at), not "now".
    timestamp = item.record.created_at.timestamp()
    return CamelContextRecord(memory_record=to_camel(item.record), score=item.score, timestamp=timestamp)


__all__ = ["CAMEL_RECORD_KEY", "CamelMemory", "CamelTokenCounter", "to_camel", "to_memcore"]
