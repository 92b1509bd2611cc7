"""What a memory saves, how much it recalls, and how wide recall reaches.

Defaults are chosen for a chat agent with long-term memory: every turn saved,
five recalled records of at most 2,000 characters each, recall across all the
sessions of the same agent and user, and nothing injected when recall is empty.
"""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar, Literal

import pydantic

from memcore.agent.recall import HybridRecall, RecallMode
from memcore.errors import InvalidInputError
from memcore.model_base import MemcoreModel
from memcore.scope import Scope

RecallReach = Literal["session", "agent", "user", "tenant"]

_KEPT_FIELDS: dict[str, tuple[str, ...]] = {
    "session": ("tenant", "user_id", "agent_id", "session_id"),
    "agent": ("tenant", "user_id", "agent_id"),
    "user": ("tenant", "user_id"),
    "tenant": ("tenant",),
}


class MemoryPolicy(MemcoreModel):
    """How an :class:`~memcore.agent.memories.AgentMemory` saves and recalls.

    :param auto_save: :meth:`~memcore.agent.memories.AgentMemory.observe` stores the
        turns it is shown (``True``, default); with ``False`` only explicit
        ``write``/``write_records`` calls store anything.
    :param inject_when_empty: when recall finds nothing, add a short system note
        saying so (``False``, default: add nothing).
    :param limit: how many records recall returns (default 5).
    :param max_chars: recalled content longer than this is cut in the context,
        never in the store (default 2,000).
    :param reach: how far recall reaches from the memory's own scope: the
        ``session`` alone, every session of the ``agent`` (default), everything of
        the ``user``, or the whole ``tenant``. Fields the memory's scope leaves
        unset stay unset.
    :param recall_mode: how a query is matched: ``"dense"`` (vector similarity), ``"keyword"``
        (BM25), ``"hybrid"`` (both, fused, smoothed along sessions; see :mod:`memcore.agent.recall`
        and the LoCoMo figures in the README), or ``"auto"`` (default): the store's
        ``capabilities.default_recall`` (hybrid in the built-in stores, dense in the others).
    :param hybrid: the settings of hybrid recall.
    :param ttl: how long the records the memory writes (turns and notes) live; ``None``
        (default) keeps them until deleted. Needs a store with ``capabilities.expiry``.
    :param refresh_on_read: a recalled record that expires lives ``ttl`` longer from the
        recall (LangGraph's ``refresh_on_read``); ``False`` by default.
    :param consolidation_threshold: :meth:`~memcore.agent.memories.AgentMemory.remember`
        refreshes an existing note of the same speaker at least this similar (cosine) instead
        of adding a second one (default 0.95).
    """

    invalid_error: ClassVar[type[InvalidInputError]] = InvalidInputError

    auto_save: bool = True
    inject_when_empty: bool = False
    limit: int = pydantic.Field(default=5, ge=1, le=1_000)
    max_chars: int = pydantic.Field(default=2_000, ge=1)
    reach: RecallReach = "agent"
    recall_mode: RecallMode = "auto"
    hybrid: HybridRecall = pydantic.Field(default_factory=HybridRecall)
    ttl: timedelta | None = None
    refresh_on_read: bool = False
    consolidation_threshold: float = pydantic.Field(default=0.95, ge=-1.0, le=1.0)

    @pydantic.field_validator("ttl")
    @classmethod
    def _positive_ttl(cls, ttl: timedelta | None) -> timedelta | None:
        if ttl is not None and ttl <= timedelta(0):
            raise ValueError(f"ttl must be positive, got {ttl}")
        return ttl

    def recall_scope(self, scope: Scope) -> Scope:
        """The scope recall reads, derived from a memory's own ``scope``.

        Recall widens to a level only when the scope names that level: reaching
        every session of the ``agent`` needs ``agent_id``, the ``user`` needs
        ``user_id``, the ``tenant`` needs ``tenant``. Otherwise the memory's own
        scope is used, so a scope that names only a tenant and a session never
        widens to every user of the tenant. Where recall does not widen (and always for the
        ``session`` reach) it reads the memory's scope exactly, never the agents or sessions below.
        """
        kept_fields = _KEPT_FIELDS[self.reach]
        if self.reach == "session" or getattr(scope, kept_fields[-1]) is None:
            return scope.exact()
        return Scope(**{name: value for name, value in scope.items() if name in kept_fields})
