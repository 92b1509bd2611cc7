"""Turning retrieved records into a chat prompt that fits a token budget.

A memory retrieves :class:`~memcore.records.ContextRecord` objects (for
``LongtermMemory``: the system message, recalled hits and the recent window)
and passes them to a :class:`ContextCreator`, which returns OpenAI chat
messages and their token count, and enforces the budget for real:

* The returned count is the token counter applied to the returned messages,
  computed on the final list, and is at most ``token_limit``; nothing assumes
  that a prompt costs the sum of its messages.
* The first system or developer message is pinned: never dropped, always first
  in the output. If it alone does not fit, :class:`~memcore.errors.ContextBudgetError`
  says by how much. Later system or developer messages are ordinary messages.
* An assistant message with tool calls and the tool messages answering them
  form one unit, kept or dropped together. A tool message is kept only if it
  answers a call of an earlier assistant message among the records that no
  earlier tool message already answered; any other tool message is an orphan
  and is dropped whatever the budget, since chat APIs reject a tool result
  without its call. Likewise an assistant message with a call that no result
  among the records answers is incomplete and dropped, with the results it has:
  chat APIs reject a tool call without its result too.
* Records with the same id appear once: the occurrence from the recent window
  (``source="history"``) wins over a recalled one, else the first wins.
* Units are dropped whole, in the creator's priority order (oldest first, or
  lowest score first), until the prompt fits. The survivors follow the pinned
  message in time order (``created_at``; records of the same time keep the
  order they were passed in), so that a later fact always comes after an
  earlier one; a tool unit stays together, its call first.

With no records at all the output is empty and its count is the counter's
count of an empty prompt (the reply priming of :class:`~memcore.agent.tokens.HeuristicTokenCounter`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from memcore.agent.tokens import HeuristicTokenCounter, TokenCounter
from memcore.errors import ContextBudgetError
from memcore.records import ContextRecord, Message, RecordKey

_PINNABLE_ROLES = frozenset({"system", "developer"})


@runtime_checkable
class ContextCreator(Protocol):
    """Builds a chat prompt from records within a token budget."""

    def create_context(
        self, records: Sequence[ContextRecord], token_limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """The prompt for ``records``, trimmed to ``token_limit``.

        :param records: the candidate records, in any order (ties in time keep this order).
        :param token_limit: the most tokens the prompt may cost; a positive int.
        :returns: the chat-completions messages and their exact token count.
        :raises ContextBudgetError: if ``token_limit`` is not a positive int, or
            the pinned system message alone exceeds it.
        """
        ...


@dataclass
class _Unit:
    """Records kept or dropped together, with their positions in the deduplicated input."""

    members: list[tuple[int, ContextRecord]]

    @property
    def oldest(self) -> datetime:
        return min(record.record.created_at for _, record in self.members)

    @property
    def first_position(self) -> int:
        return self.members[0][0]


class _BudgetedContextCreator(ABC):
    """The shared algorithm; subclasses only choose which unit to drop first."""

    def __init__(self, token_counter: TokenCounter | None = None) -> None:
        self.token_counter: TokenCounter = (
            token_counter if token_counter is not None else HeuristicTokenCounter()
        )

    @abstractmethod
    def _drop_key(self, unit: _Unit) -> tuple[Any, ...]:
        """Sort key of the drop order: the unit with the smallest key goes first."""

    def create_context(
        self, records: Sequence[ContextRecord], token_limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """The prompt for ``records``, trimmed to ``token_limit`` (see :mod:`memcore.agent.context`).

        :param records: the candidate records, in any order (ties in time keep this order).
        :param token_limit: the most tokens the prompt may cost; a positive int.
        :returns: the chat-completions messages and
            ``token_counter.count(messages)``, which is at most ``token_limit``.
        :raises ContextBudgetError: if ``token_limit`` is not a positive int, or
            the pinned system message (or, without one, the empty prompt) alone
            costs more than ``token_limit``.
        """
        if isinstance(token_limit, bool) or not isinstance(token_limit, int) or token_limit <= 0:
            raise ContextBudgetError(f"token_limit must be a positive int, got {token_limit!r}")
        ordered = _deduplicate(records)
        pinned_at = next((i for i, r in enumerate(ordered) if r.record.message.role in _PINNABLE_ROLES), None)
        pinned = ordered[pinned_at].record.message if pinned_at is not None else None
        head = [pinned] if pinned is not None else []
        head_tokens = self.token_counter.count(head)
        if head_tokens > token_limit:
            what = f"the {pinned.role} message" if pinned is not None else "an empty prompt"
            raise ContextBudgetError(
                f"{what} alone costs {head_tokens} tokens, {head_tokens - token_limit} more than "
                f"token_limit={token_limit}; raise the limit or shorten it"
            )
        drop_order = sorted(_units(ordered, pinned_at), key=self._drop_key)

        def prompt_without(dropped: int) -> list[Message]:
            kept = sorted(drop_order[dropped:], key=lambda unit: (unit.oldest, unit.first_position))
            return head + [record.record.message for unit in kept for _, record in unit.members]

        # Find the fewest units to drop by bisection over exact counts: a monotonic counter makes
        # "fits after dropping k" monotonic in k. Dropping everything is known to fit (head_tokens), and
        # only a computed count moves `fits`, so even a non-monotonic counter's result is within budget.
        fits, fits_tokens = len(drop_order), head_tokens
        too_few = -1
        while fits - too_few > 1:
            middle = (too_few + fits) // 2
            tokens = self.token_counter.count(prompt_without(middle))
            if tokens <= token_limit:
                fits, fits_tokens = middle, tokens
            else:
                too_few = middle
        return [message.to_openai() for message in prompt_without(fits)], fits_tokens


class ChronologicalContextCreator(_BudgetedContextCreator):
    """Fits the budget by dropping the oldest units first (by ``record.created_at``).

    A tool-call unit is as old as its oldest message. See :mod:`memcore.agent.context`
    for what every context creator guarantees.

    :param token_counter: counts prompt tokens; by default a
        :class:`~memcore.agent.tokens.HeuristicTokenCounter`.
    """

    def _drop_key(self, unit: _Unit) -> tuple[Any, ...]:
        return (unit.oldest, unit.first_position)


class ScoreBasedContextCreator(_BudgetedContextCreator):
    """Fits the budget by dropping the lowest-scored units first, the oldest first among equals.

    A tool-call unit scores as its best-scored message. A NaN score counts as
    the lowest. See :mod:`memcore.agent.context` for what every context creator
    guarantees.

    :param token_counter: counts prompt tokens; by default a
        :class:`~memcore.agent.tokens.HeuristicTokenCounter`.
    """

    def _drop_key(self, unit: _Unit) -> tuple[Any, ...]:
        best = max((-math.inf if math.isnan(r.score) else r.score) for _, r in unit.members)
        return (best, unit.oldest, unit.first_position)


def _deduplicate(records: Sequence[ContextRecord]) -> list[ContextRecord]:
    """Each record once (by scope and id), the history copy preferred, in first-seen order."""
    chosen: dict[RecordKey, int] = {}
    for index, record in enumerate(records):
        key = record.record.key
        previous = chosen.get(key)
        if previous is None or (record.source == "history" and records[previous].source != "history"):
            chosen[key] = index
    return [records[index] for index in sorted(chosen.values())]


def _units(ordered: Sequence[ContextRecord], pinned_at: int | None) -> list[_Unit]:
    """Groups every record but the pinned one into units; orphans and incomplete calls are left out."""
    units: list[_Unit] = []
    unanswered: dict[str, _Unit] = {}
    for position, record in enumerate(ordered):
        message = record.record.message
        if position == pinned_at:
            continue
        if message.tool_call_id is not None:
            unit = unanswered.pop(message.tool_call_id, None)
            if unit is not None:
                unit.members.append((position, record))
            continue
        unit = _Unit([(position, record)])
        units.append(unit)
        for call in message.tool_calls or ():
            unanswered[call.id] = unit
    incomplete = {id(unit) for unit in unanswered.values()}
    return [unit for unit in units if id(unit) not in incomplete]
