"""Turn vectors that carry the turn before them: a reply is found by what it answers.

"Oslo, in June" says nothing of travel; the question it answers does. So a conversation turn
(a ``user`` or ``assistant`` record of a session) is stored with the embedding of its own text plus
``weight`` times the embedding of the turn just before it in the same session, normalised. On
LoCoMo's development split (README, Benchmarks) a weight of 0.3 lifts dense recall@10 from 0.44 to
0.50 and hybrid recall@10 from 0.76 to 0.77. Only the turn *before* counts, so a stored vector
never changes when later turns arrive, and the previous turn's own embedding is used (not its
stored, already contextual vector), so context does not pile up along a session.

Records without a session, and other roles (system prompts, tool traffic), keep their own
embedding and give none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from memcore.filters import FilterSpec
from memcore.records import MemoryRecord
from memcore.store import Store
from memcore.validation import Matrix, normalize_rows

DEFAULT_PREVIOUS_TURN_WEIGHT = 0.3
"""Chosen on LoCoMo's development split (0.2-0.7 all help; 0.3 was best for hybrid recall)."""
TURN_ROLES = ("user", "assistant")
"""The roles whose records are conversation turns: they take and give context."""
_TURNS: FilterSpec = {"role": {"$in": list(TURN_ROLES)}}


def _is_turn(record: MemoryRecord) -> bool:
    return record.scope.session_id is not None and record.message.role in TURN_ROLES


def with_previous_turns(
    store: Store,
    records: Sequence[MemoryRecord],
    vectors: Matrix,
    embed: Callable[[Sequence[str]], Matrix],
    text_of: Callable[[MemoryRecord], str],
    weight: float,
) -> Matrix:
    """``vectors`` (one row per record) with each turn's previous turn mixed in at ``weight``.

    The previous turn of a record is the turn before it in the batch (batches are in time
    order), else the newest turn already stored in its session, read through the record's own
    scope: one small read per session a batch starts, and one ``embed`` call, which the memory's
    embedding cache answers for turns it wrote itself.
    """
    if weight == 0:
        return vectors
    previous: dict[int, int] = {}
    latest: dict[tuple[str | None, ...], int] = {}
    starts: dict[int, MemoryRecord] = {}
    for index, record in enumerate(records):
        if not _is_turn(record):
            continue
        session = record.scope.as_tuple()
        if session in latest:
            previous[index] = latest[session]
        else:
            stored = store.list(record.scope, filter=_TURNS, order="desc", limit=1, before=record.created_at)
            if stored:
                starts[index] = stored[0]
        latest[session] = index
    if not previous and not starts:
        return vectors
    mixed = np.array(vectors, dtype=np.float32, copy=True)
    for index, before in previous.items():
        mixed[index] += weight * vectors[before]
    if starts:
        earlier = embed([text_of(record) for record in starts.values()])
        for index, vector in zip(starts, earlier, strict=True):
            mixed[index] += weight * vector
    changed = sorted([*previous, *starts])
    mixed[changed] = normalize_rows(mixed[changed])
    return mixed
