"""Sessions: load a conversation as a model, change it, commit it back; summarise when it grows.

:class:`SessionMemory` keeps each session in its own scope (the memory's scope
plus ``session_id``) on any store. ``load`` returns a :class:`MemoryModel`;
``commit`` makes the store match it, unless another writer committed the
session since it was loaded (:class:`~memcore.errors.ConflictError`: reload
and retry). When the prompt the model makes exceeds ``summarize_over`` tokens,
the older turns (never the leading system or developer turns) are replaced *in
the prompt* by a summary record (``kind="summary"``) written by a pluggable
:class:`Summarizer`. Each summary lists the ids of the turns it newly covers in
``metadata.covers`` (so a record stays small however long the session) and the
summary it extends in ``metadata.extends``. The originals stay in the store
(recallable by a :class:`~memcore.agent.memories.VectorMemory` when the session
memory has an embedder) until the user forgets them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar, Protocol
from uuid import UUID, uuid4

import pydantic

from memcore.agent.blocks import PINNED_ROLES, embedding_text
from memcore.agent.tokens import HeuristicTokenCounter, TokenCounter
from memcore.embedders.base import Embedder
from memcore.errors import ConflictError, InvalidInputError, InvalidRecordError, ScopeError
from memcore.model_base import MemcoreModel
from memcore.records import SUMMARY_KIND, MemoryRecord, Message, MetadataValue, utc_now
from memcore.scope import Scope, validate_scope_value
from memcore.store import Store, VectorSpace

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


class SessionTurn(MemcoreModel):
    """One message of a session, with the id and time of its record."""

    id: UUID = pydantic.Field(default_factory=uuid4)
    message: Message
    created_at: datetime = pydantic.Field(default_factory=utc_now)


def without_orphans(turns: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """The turns minus tool results whose call is not among them (say, the call was forgotten)."""
    calls: set[str] = set()
    kept = []
    for turn in turns:
        calls.update(call.id for call in turn.message.tool_calls or ())
        if turn.message.tool_call_id is None or turn.message.tool_call_id in calls:
            kept.append(turn)
    return kept


def check_tool_pairs(messages: Sequence[Message]) -> None:
    """Every tool result must answer a call made by an earlier assistant message.

    :raises InvalidRecordError: naming the first orphan tool result.
    """
    calls: set[str] = set()
    for message in messages:
        calls.update(call.id for call in message.tool_calls or ())
        if message.role == "tool" and message.tool_call_id not in calls:
            raise InvalidRecordError(
                f"the tool result for call {message.tool_call_id!r} answers no earlier assistant tool call"
            )


class MemoryModel(MemcoreModel):
    """A session as an agent works on it: its turns, and the summary of older ones.

    Mutable: append turns with :meth:`append`, then ``SessionMemory.commit``.
    Round-trips exactly through ``model_dump()`` / ``model_validate()``.

    :param session_id: the session (a valid scope value).
    :param turns: the messages not covered by the summary, oldest first
        (``created_at`` must not decrease: append, don't insert).
    :param summary: the summary of the turns before them, if any.
    :param revision: what :meth:`SessionMemory.load` saw; ``commit`` refuses the
        model if the stored session has changed since (``None``: a new session).
    """

    model_config = pydantic.ConfigDict(frozen=False, extra="forbid", validate_assignment=True)

    session_id: str
    turns: list[SessionTurn] = pydantic.Field(default_factory=list)
    summary: str | None = None
    revision: str | None = None

    @pydantic.field_validator("session_id")
    @classmethod
    def _check_session_id(cls, value: str) -> str:
        return validate_scope_value(value)

    @pydantic.model_validator(mode="after")
    def _check_turns(self) -> MemoryModel:
        ids = [turn.id for turn in self.turns]
        if len(ids) != len(set(ids)):
            raise ValueError("two turns share one id")
        stamps = [turn.created_at for turn in self.turns]
        if stamps != sorted(stamps):
            raise ValueError("turns must be in time order: append new turns rather than inserting them")
        check_tool_pairs([turn.message for turn in self.turns])
        return self

    def append(self, message: Message) -> SessionTurn:
        """Add a message as the newest turn; a tool result must answer an earlier call."""
        check_tool_pairs([*(turn.message for turn in self.turns), message])
        turn = SessionTurn(message=message)
        self.turns.append(turn)
        return turn

    @property
    def messages(self) -> list[Message]:
        """The turns' messages, oldest first."""
        return [turn.message for turn in self.turns]

    def to_messages(self) -> list[Message]:
        """The prompt: the leading system turns, the summary (as a system message) if any, then the rest."""
        messages = self.messages
        lead = 0
        while lead < len(messages) and messages[lead].role in PINNED_ROLES:
            lead += 1
        summary = (
            [] if self.summary is None else [Message(role="system", content=SUMMARY_PREFIX + self.summary)]
        )
        return messages[:lead] + summary + messages[lead:]


class Summarizer(Protocol):
    """Condenses older turns into a summary; the hook for an LLM-backed summariser."""

    def summarize(self, messages: Sequence[Message], previous: str | None) -> str:
        """A summary of ``previous`` (the earlier summary, if any) followed by ``messages``."""
        ...


_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


class ExtractiveSummarizer:
    """An offline summariser: the first sentence of each user and assistant message.

    Lines are ``role: sentence``, each cut to ``max_line_chars``; when the whole
    exceeds ``max_chars``, the oldest lines go first, so the summary keeps the
    latest facts.
    """

    def __init__(self, max_chars: int = 2_000, max_line_chars: int = 200) -> None:
        self.max_chars, self.max_line_chars = max_chars, max_line_chars

    def summarize(self, messages: Sequence[Message], previous: str | None) -> str:
        lines = [] if previous is None else previous.splitlines()
        for message in messages:
            if message.role not in ("user", "assistant") or not message.content.strip():
                continue
            sentence = _SENTENCE_END.split(message.content.strip(), maxsplit=1)[0]
            if len(sentence) > self.max_line_chars:
                sentence = sentence[: self.max_line_chars - 1] + "…"
            lines.append(f"{message.role}: {sentence}")
        while lines and len("\n".join(lines)) > self.max_chars:
            lines.pop(0)
        return "\n".join(lines)


class LLMSummarizer:
    """Summarise with a language model through a completion function you supply.

    :param complete: takes chat-completions messages, returns the model's reply text.
    :param instructions: the system prompt.
    """

    INSTRUCTIONS: ClassVar[str] = (
        "Summarise the conversation below for the assistant's future reference. Keep every fact about the "
        "user, every decision and every open task; drop pleasantries. Answer with the summary only."
    )

    def __init__(
        self, complete: Callable[[list[dict[str, Any]]], str], instructions: str | None = None
    ) -> None:
        self.complete, self.instructions = complete, instructions or self.INSTRUCTIONS

    def summarize(self, messages: Sequence[Message], previous: str | None) -> str:
        transcript = "\n".join(f"{m.role}: {m.content}" for m in messages if m.content.strip())
        if previous:
            transcript = f"Earlier summary:\n{previous}\n\nConversation:\n{transcript}"
        reply = self.complete(
            [{"role": "system", "content": self.instructions}, {"role": "user", "content": transcript}]
        )
        if not isinstance(reply, str) or not reply.strip():
            raise InvalidInputError("the summarising model returned no text")
        return reply.strip()


class SessionMemory:
    """Load, commit and summarise sessions, each in its own scope, on any store.

    :param store: where the records live.
    :param scope: the owner of the sessions (tenant, user, agent); must not set ``session_id``.
    :param embedder: if given, turns are written with vectors, so that a
        :class:`~memcore.agent.memories.VectorMemory` can recall them (and summarised
        turns stay recallable).
    :param summarizer: condenses older turns (default :class:`ExtractiveSummarizer`).
    :param token_counter: measures the prompt (default :class:`HeuristicTokenCounter`).
    :param summarize_over: summarise when the prompt exceeds this many tokens; ``None`` never.
    :param keep_recent: how many turns stay verbatim after summarising.
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        *,
        embedder: Embedder | None = None,
        summarizer: Summarizer | None = None,
        token_counter: TokenCounter | None = None,
        summarize_over: int | None = 3_000,
        keep_recent: int = 10,
    ) -> None:
        if scope.session_id is not None or scope.is_everything:
            raise ScopeError("a SessionMemory's scope names the owner (tenant, user, agent), not a session")
        self.store, self.scope, self.embedder = store, scope, embedder
        self.summarizer = summarizer or ExtractiveSummarizer()
        self.token_counter = token_counter or HeuristicTokenCounter()
        self.summarize_over, self.keep_recent = summarize_over, keep_recent
        if embedder is not None:
            store.bind_vector_space(VectorSpace(embedder.name, embedder.dim))

    def session_scope(self, session_id: str) -> Scope:
        """The scope of one session's records. Loads and commits read and delete it exactly: a
        user's session ``s1`` is not the session ``s1`` of one of the user's agents, whose records
        belong to that agent's SessionMemory."""
        return Scope(**dict(self.scope.items()), session_id=session_id)

    def _stored(self, session_id: str) -> tuple[list[MemoryRecord], MemoryRecord | None, str]:
        """The session's turns not covered by its summaries, its latest summary, and a revision."""
        records = self.store.list(self.session_scope(session_id).exact())
        summaries = [r for r in records if r.kind == SUMMARY_KIND]
        covered = {str(i) for summary in summaries for i in summary.metadata.get("covers", [])}  # type: ignore[union-attr]
        turns = [r for r in records if r.kind != SUMMARY_KIND and str(r.id) not in covered]
        latest = summaries[-1] if summaries else None
        state = [str(r.id) + r.message.model_dump_json() for r in turns] + [str(latest.id) if latest else ""]
        revision = hashlib.sha256("\n".join(state).encode()).hexdigest()[:16]
        return turns, latest, revision

    def load(self, session_id: str) -> MemoryModel:
        """The session as stored: its summary (if any) and the turns after it.

        Tool results whose call was forgotten are left out, so the model stays valid.
        """
        turns, summary, revision = self._stored(session_id)
        return MemoryModel(
            session_id=session_id,
            turns=[
                SessionTurn(id=r.id, message=r.message, created_at=r.created_at)
                for r in without_orphans(turns)
            ],
            summary=None if summary is None else summary.message.content,
            revision=revision if turns or summary else None,
        )

    async def aload(self, session_id: str) -> MemoryModel:
        """:meth:`load`, awaited (on the store's workers)."""
        return await self.store.run_in_worker(self.load, session_id)

    def commit(self, session_id: str, model: MemoryModel) -> MemoryModel:
        """Make the store match ``model``; summarise if its prompt is over budget.

        New or changed turns are written, turns removed from the model are
        deleted. Returns the model as committed (with a new summary and fewer
        turns if it was summarised, and a new revision).

        :raises InvalidRecordError: if the model is invalid (orphan tool results,
            repeated ids, turns out of time order).
        :raises ConflictError: if the session changed in the store since ``model`` was loaded.
        """
        if model.session_id != session_id:
            raise InvalidInputError(f"the model is of session {model.session_id!r}, not {session_id!r}")
        model = MemoryModel.model_validate(model.model_dump())
        scope = self.session_scope(session_id)
        stored, summary, revision = self._stored(session_id)
        if (stored or summary) and model.revision != revision:
            raise ConflictError(
                f"session {session_id!r} changed since it was loaded; load it again and redo the change"
            )
        by_id = {record.id: record for record in stored}
        wanted = {turn.id for turn in model.turns}
        changed = [
            MemoryRecord(id=turn.id, scope=scope, message=turn.message, created_at=turn.created_at)
            for turn in model.turns
            if turn.id not in by_id or by_id[turn.id].message != turn.message
        ]
        self._write(changed)
        self.store.delete(scope.exact(), [record_id for record_id in by_id if record_id not in wanted])
        if (
            self.summarize_over is not None
            and self.token_counter.count(model.to_messages()) > self.summarize_over
        ):
            self._summarise(scope, model, summary)
        return self.load(session_id)

    async def acommit(self, session_id: str, model: MemoryModel) -> MemoryModel:
        """:meth:`commit`, awaited (on the store's workers; a summarizer that calls a model holds
        one meanwhile)."""
        return await self.store.run_in_worker(self.commit, session_id, model)

    def _write(self, records: list[MemoryRecord]) -> None:
        if not records:
            return
        if self.embedder is None:
            self.store.add(records)
        else:
            self.store.add(records, self.embedder.embed([embedding_text(r.message) for r in records]))

    def _summarise(self, scope: Scope, model: MemoryModel, previous: MemoryRecord | None) -> None:
        lead = 0
        while lead < len(model.turns) and model.turns[lead].message.role in PINNED_ROLES:
            lead += 1  # the system prompt stays verbatim
        split = max(lead, len(model.turns) - self.keep_recent)
        while lead < split < len(model.turns) and model.turns[split].message.role == "tool":
            split -= 1  # never separate tool results from the call they answer
        older = model.turns[lead:split]
        if not older:
            return
        text = self.summarizer.summarize([turn.message for turn in older], model.summary)
        metadata: dict[str, MetadataValue] = {"covers": [str(turn.id) for turn in older]}
        if previous is not None:
            metadata["extends"] = str(previous.id)
        record = MemoryRecord(
            scope=scope, message=Message(role="system", content=text), kind=SUMMARY_KIND, metadata=metadata
        )
        self._write([record])
