"""Hybrid recall: dense and keyword candidates fused, then smoothed along the conversation.

A question's answer is often in the turn *next to* the one that matches it ("Where did you go?"
matched, "Oslo, in June" is the reply), and a conversation that matched once likely holds more.
So recall goes in four steps, chosen on LoCoMo's development split (the README's benchmark section
has the figures):

1. Candidates: the ``candidates`` best records by vector similarity and by BM25 keywords, each
   list's scores rescaled to [0, 1] (min-max within the list) and summed with weights
   ``dense_weight`` and ``1 - dense_weight``. Scores are fused, not ranks (as RRF would): ranks
   throw away how far ahead the best matches are.
2. Neighbours: the records just before and after each of the ``neighbours_of`` best candidates in
   its session are read; each gains ``neighbour_weight`` times the best fused score of a candidate
   next to it. Records that were not candidates can enter this way.
3. Sessions: each record gains ``session_weight`` times the best fused score of its session.
4. Speakers: when the query names the speaker of some of these records (their
   :attr:`~memcore.records.Message.name`, as a whole word), their scores are multiplied by
   ``1 + speaker_weight``: "What does Melanie paint?" is more likely answered by Melanie.

Records without a session have no neighbours (their "session" would be everything of their
owner). Everything is read through the caller's scope and filter, so nothing outside them is ever
seen.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar, Literal

import pydantic

from memcore.errors import InvalidInputError
from memcore.filters import Filter
from memcore.model_base import MemcoreModel
from memcore.records import MemoryRecord, ScoredRecord
from memcore.scope import Scope
from memcore.store import Store
from memcore.telemetry import internal_span
from memcore.validation import Vector

RecallMode = Literal["auto", "hybrid", "dense", "keyword"]

_WORD = re.compile(r"\w+")


class HybridRecall(MemcoreModel):
    """The settings of hybrid recall (see the module docstring); defaults chosen on LoCoMo's dev split.

    :param candidates: how many records each of dense and keyword search contributes.
    :param dense_weight: the dense share of the fused score (the keyword share is the rest).
    :param neighbour_weight: how much of the better neighbour's fused score a record gains.
    :param session_weight: how much of its session's best fused score a record gains.
    :param neighbours_of: how many of the best candidates have their neighbours read (two small
        reads each).
    :param speaker_weight: how much more a record counts when the query names its speaker.
    """

    invalid_error: ClassVar[type[InvalidInputError]] = InvalidInputError

    candidates: int = pydantic.Field(default=50, ge=1, le=1_000)
    dense_weight: float = pydantic.Field(default=0.35, ge=0.0, le=1.0)
    neighbour_weight: float = pydantic.Field(default=0.3, ge=0.0)
    session_weight: float = pydantic.Field(default=0.45, ge=0.0)
    neighbours_of: int = pydantic.Field(default=10, ge=0, le=100)
    speaker_weight: float = pydantic.Field(default=0.3, ge=0.0)


def resolved_mode(mode: RecallMode, store: Store) -> RecallMode:
    """``"auto"`` is the store's :attr:`~memcore.store.Capabilities.default_recall`.

    Hybrid recall finds more of the right turns (the README's LoCoMo figures), at the price
    of a keyword search and a few small ordered reads per recall: cheap in the built-in
    stores, which answer them from memory; in the others each is a query to the engine (in
    Qdrant Edge the keyword search alone is a count of the scope and one per query term), so
    there ``auto`` stays dense.
    """
    return store.capabilities.default_recall if mode == "auto" else mode


_Identity = tuple[tuple[str | None, ...], int]
"""A record's exact scope and id, the id as an int: :attr:`MemoryRecord.key` hashes a ``UUID``, in
Python, and a recall hashes its candidates' keys about a thousand times."""


def _identity(record: MemoryRecord) -> _Identity:
    return (record.scope.as_tuple(), record.id.int)


def _rescaled(hits: Sequence[ScoredRecord], weight: float) -> dict[_Identity, float]:
    if not hits:
        return {}
    high, low = max(h.score for h in hits), min(h.score for h in hits)
    span = high - low
    return {_identity(h.record): weight * ((h.score - low) / span if span > 0 else 1.0) for h in hits}


def hybrid_search(
    store: Store,
    scope: Scope,
    *,
    vector: Vector,
    keywords: str,
    filter: Filter | None,
    limit: int,
    settings: HybridRecall,
) -> list[ScoredRecord]:
    """The ``limit`` best records of ``scope`` for a query given as a vector and as keywords.

    Records are told apart by scope and id: a scope spanning several users may hold two records
    of one id, and each keeps its own score.
    """
    dense = store.search(scope, vector=vector, filter=filter, limit=settings.candidates)
    keyword = store.search(scope, keywords=keywords, filter=filter, limit=settings.candidates)
    # The neighbour reads (two small lists per candidate) are counted here, not given a span each.
    with internal_span("memcore.recall.fuse", store_spans=False) as span:
        ranked, reads = _fused(
            store, dense, keyword, keywords=keywords, filter=filter, limit=limit, settings=settings
        )
        if span is not None and span.is_recording():
            span.set_attribute("memcore.recall.dense_candidates", len(dense))
            span.set_attribute("memcore.recall.keyword_candidates", len(keyword))
            span.set_attribute("memcore.recall.neighbour_reads", reads)
            span.set_attribute("memcore.recall.hits", len(ranked))
    return ranked


def _fused(
    store: Store,
    dense: list[ScoredRecord],
    keyword: list[ScoredRecord],
    *,
    keywords: str,
    filter: Filter | None,
    limit: int,
    settings: HybridRecall,
) -> tuple[list[ScoredRecord], int]:
    """Steps 2 to 4 of the module docstring over the candidates of step 1; and how many store
    reads the neighbours took."""
    fused = _rescaled(dense, settings.dense_weight)
    for key, score in _rescaled(keyword, 1.0 - settings.dense_weight).items():
        fused[key] = fused.get(key, 0.0) + score
    records = {_identity(h.record): h.record for h in [*dense, *keyword]}
    best_of_session: dict[tuple[str | None, ...], float] = {}
    for (session, _), score in fused.items():
        best_of_session[session] = max(best_of_session.get(session, 0.0), score)
    neighbour: dict[_Identity, float] = {}
    reads = 0
    for key in sorted(fused, key=lambda k: -fused[k])[: settings.neighbours_of]:
        reads += 2 if records[key].scope.session_id is not None else 0
        for around in _neighbours(store, records[key], filter):
            identity = _identity(around)
            records.setdefault(identity, around)
            neighbour[identity] = max(neighbour.get(identity, 0.0), fused[key])
    final = {
        key: fused.get(key, 0.0)
        + settings.neighbour_weight * neighbour.get(key, 0.0)
        + settings.session_weight * best_of_session.get(key[0], 0.0)
        for key in records
    }
    named = _speakers_named(keywords, {r.message.name for r in records.values()})
    if named and settings.speaker_weight:
        for key, record in records.items():
            if record.message.name in named:
                final[key] *= 1.0 + settings.speaker_weight
    ranked = sorted(final, key=lambda key: (-final[key], records[key].created_at))
    return [ScoredRecord.of(records[k], final[k]) for k in ranked[:limit] if final[k] > 0], reads


def _speakers_named(query: str, speakers: set[str | None]) -> set[str]:
    """The speakers whose names occur in ``query`` as whole words (case-insensitive)."""
    words = set(_WORD.findall(query.casefold()))
    return {
        name
        for name in speakers
        if name is not None and (parts := _WORD.findall(name.casefold())) and words.issuperset(parts)
    }


def _neighbours(store: Store, record: MemoryRecord, filter: Filter | None) -> list[MemoryRecord]:
    """The records just before and just after ``record`` in its session (none without a session).

    Read through the record's own scope, which lies inside the caller's: never wider.
    """
    if record.scope.session_id is None:
        return []
    before = store.list(record.scope, filter=filter, order="desc", limit=1, before=record.created_at)
    after = store.list(record.scope, filter=filter, order="asc", limit=1, after=record.created_at)
    return before + after
