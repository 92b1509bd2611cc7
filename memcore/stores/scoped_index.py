"""An exact, in-memory record index partitioned by owner, masked by session.

The engine behind the built-in stores. Records are grouped into one partition
per owner (tenant, user, agent); each partition keeps its vectors in one
contiguous float32 matrix and its sessions, roles and kinds in code columns, so
a scoped search is a single matrix-vector product plus numpy masks, never a
Python loop over records, whether it covers one session or all of an agent's.
A query scope that leaves owner fields unset covers several partitions; they
are found through a per-field value index. A record is its exact scope plus its
id: the same id may name one record in each of several scopes.

Not thread-safe by itself: stores wrap every call in their own lock.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memcore.filters import Filter, evaluate
from memcore.keywords import idf, term_score, terms
from memcore.kit import check_same_dimension, clamp_score
from memcore.queries import KeywordQuery, ListQuery, Order, SearchQuery
from memcore.records import MemoryRecord, ScoredRecord, epoch_micros
from memcore.scope import SCOPE_FIELDS, Scope
from memcore.store import text_matches
from memcore.stores.blas_threads import single_blas_thread
from memcore.stores.partition import (
    ID_LOW_BITS,
    Partition,
    RecordCache,
    Rows,
    match_test,
    session_code,
    whole_test,
)
from memcore.stores.vector_blocks import BlockPool
from memcore.validation import Matrix

ScopeKey = tuple[str | None, str | None, str | None, str | None]
OwnerKey = tuple[str | None, str | None, str | None]
RecordKey = tuple[Scope, UUID]
"""A record's identity: its scope and its id."""
Selection = list[tuple[Partition, npt.NDArray[np.bool_] | None]]
"""Partitions visible through a scope, each with the mask of its rows in the scope (``None``: all)."""

_GATHER_FRACTION = 0.3
"""Below this share of a partition's rows, a search scores only its candidates' vectors (gathered);
above it, every row (one contiguous product is then cheaper than gathering)."""
_IDS_ONE_BY_ONE, _LOOKUPS_ONE_BY_ONE = 8, 4_096
"""A read by id looks each id up in each partition of its scope, unless it reads more than 8 ids
with more than 4,096 lookups (a wide scope over many owners: an admin read, a copy's check); then
it first finds the partitions holding its ids in one pass over their id columns."""


class ScopedIndex:
    """Records and their unit vectors, partitioned by owner, answering exact scoped queries."""

    def __init__(self, dimension: int | None = None) -> None:
        self.dimension = dimension
        # No index-wide map of ids: a read by id looks the id up in the partitions of its scope
        # (one for an exact or owner scope), where such a map cost ~50 bytes a record.
        self._partitions: dict[OwnerKey, Partition] = {}
        self._size = 0
        self._cache = RecordCache()
        self._unindexed: list[OwnerKey] = []
        """Partitions loaded without a keyword index (:meth:`build_keyword_index`), last first."""
        self._by_field: list[dict[str, set[OwnerKey]]] = [{} for _ in SCOPE_FIELDS[:3]]
        self._blocks = None if dimension is None else BlockPool(dimension)

    def __len__(self) -> int:
        return self._size

    def _take_dimension(self, dimension: int) -> None:
        """Fix the index's vector dimension with its first vectors (a no-op once fixed)."""
        if self.dimension is None:
            self.dimension = dimension
            self._blocks = BlockPool(dimension)
            for partition in self._partitions.values():
                partition.set_dimension(dimension, self._blocks)

    def check_upsert(self, vectors: Matrix | None) -> None:
        """Refuse a batch whose vectors would change the dimension."""
        if vectors is not None:
            check_same_dimension(self.dimension, vectors.shape[1])

    def upsert(
        self,
        records: list[MemoryRecord],
        vectors: Matrix | None,
        has_vector: npt.NDArray[np.bool_] | None = None,
    ) -> int:
        """Insert or replace records; how many were new. Call :meth:`check_upsert` first.

        :param vectors: unit vectors, one row per record, or ``None`` for none.
        :param has_vector: which rows of ``vectors`` are real (all when omitted).
        """
        if vectors is not None:
            self._take_dimension(vectors.shape[1])
        added = 0
        for row, record in enumerate(records):
            key = _owner_key(record.scope)
            partition = self._partitions.get(key) or self._new_partition(key)
            vector = None
            if vectors is not None and (has_vector is None or has_vector[row]):
                vector = vectors[row]
            if partition.put(record, vector):
                added += 1
        self._size += added
        return added

    def _new_partition(self, key: OwnerKey, *, keywords: bool = True) -> Partition:
        partition = Partition(self.dimension or 1, key, self._cache, keywords=keywords, blocks=self._blocks)
        self._partitions[key] = partition
        for index, value in enumerate(key):
            if value is not None:
                self._by_field[index].setdefault(value, set()).add(key)
        return partition

    def _drop_partition(self, key: OwnerKey) -> None:
        self._partitions.pop(key).vectors.release()
        for index, value in enumerate(key):
            if value is not None:
                keys = self._by_field[index][value]
                keys.discard(key)
                if not keys:
                    del self._by_field[index][value]

    def select(self, scope: Scope, now: int | None, node: Filter | None = None) -> Selection:
        """The partitions visible through ``scope``, each with the mask of its rows in the scope
        and not expired at ``now`` (epoch microseconds; ``None``: expired rows too); without
        those where no row can match ``node`` (:func:`match_test`). A scope naming fewer than
        all three owner fields lists its partitions in the order of their owners' fields."""
        may_match = match_test(node)
        if scope.is_everything:
            return [
                (partition, mask)
                for partition in self._partitions.values()
                if may_match(partition) and ((mask := partition.live_mask(now)) is None or mask.any())
            ]
        if scope.is_exact:
            exact = self._partitions.get(_owner_key(scope))
            if exact is None or not may_match(exact):
                return []
            rows = exact.exact_session_mask(scope.session_id)
            live = exact.live_mask(now)
            if live is not None:
                rows &= live
            return [(exact, rows)] if rows.any() else []
        selection = []
        for partition in self._owned_within(scope):
            if not may_match(partition):
                continue
            mask = partition.session_mask(scope)
            live = partition.live_mask(now)
            if live is not None:
                mask = live if mask is None else mask & live
            if mask is None or mask.any():
                selection.append((partition, mask))
        # Sorted once the filter has ruled partitions out: most of a wide scope's, for a selective one.
        selection.sort(key=lambda chosen: _listing_order(chosen[0].owner))
        return selection

    def _owned_within(self, scope: Scope) -> list[Partition]:
        """The partitions of the owners ``scope`` (not :meth:`Scope.everything`) covers, whole or
        in part (a scope naming a session sees part of its owner's), in no particular order."""
        if scope.is_exact or (scope.user_id is not None and scope.agent_id is not None):
            owner = self._partitions.get(_owner_key(scope))  # every owner field is fixed: one owner
            return [] if owner is None else [owner]
        named = [
            self._by_field[index].get(value, set())
            for index, name in enumerate(SCOPE_FIELDS[:3])
            if (value := getattr(scope, name)) is not None
        ]
        owners: Iterable[OwnerKey] = self._partitions
        if len(named) == 1:
            owners = named[0]  # a tenant-wide scope: the tenant's owners as they are, uncopied
        elif named:
            owners = set.intersection(*named)
        return [self._partitions[key] for key in owners]

    def _rows(self, scope: Scope, ids: list[UUID], now: int | None) -> Iterator[tuple[Partition, int]]:
        """The partition and row of every record of ``ids`` visible through ``scope`` and live at ``now``."""
        partitions = list(self._partitions.values()) if scope.is_everything else self._owned_within(scope)
        if len(ids) > _IDS_ONE_BY_ONE and len(ids) * len(partitions) > _LOOKUPS_ONE_BY_ONE:
            partitions = _holding(partitions, ids)
        for record_id in ids:
            key = record_id.int
            for partition in partitions:
                if key not in partition.positions:  # most partitions of a wide scope: one dict lookup
                    continue
                for row in partition.rows_of(key):
                    if scope.matches(partition.scope_of(row)) and partition.is_live(row, now):
                        yield partition, row

    def get(self, scope: Scope, ids: list[UUID], now: int | None) -> list[MemoryRecord]:
        return [partition.record(row) for partition, row in self._rows(scope, ids, now)]

    def vectors(self, scope: Scope, ids: list[UUID], now: int | None) -> list[tuple[UUID, Matrix]]:
        return [
            (partition.record_id(row), partition.vectors.row(row).copy())
            for partition, row in self._rows(scope, ids, now)
            if partition.has_vector[row]
        ]

    def scope_counts(self, prefix: Scope, now: int | None) -> list[tuple[Scope, int]]:
        """The exact scope of the records ``prefix`` sees live at ``now``, each with its count:
        per partition, one count of its session column."""
        found: list[tuple[Scope, int]] = []
        for partition, mask in self.select(prefix, now):
            sessions = partition.sessions[: partition.size]
            rows = np.arange(partition.size) if mask is None else np.flatnonzero(mask)
            codes, counts = np.unique(sessions[rows], return_counts=True)
            for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
                found.append((partition.scopes[code], count))
        return found

    @staticmethod
    def _row_masks(
        selection: Selection, node: Filter | None
    ) -> tuple[list[npt.NDArray[np.bool_] | None], bool]:
        """Per partition, the rows in scope and (where computable) matching ``node``; and whether exact."""
        if node is None:
            return [in_scope for _, in_scope in selection], True
        masks: list[npt.NDArray[np.bool_] | None] = []
        exact = True
        whole = whole_test(node)
        for partition, in_scope in selection:
            if whole(partition):  # e.g. a key whose value follows the owner: no mask to build
                masks.append(in_scope)
                continue
            matching = partition.mask(node)
            exact = exact and matching is not None
            if matching is None:
                masks.append(in_scope)
            else:
                masks.append(matching if in_scope is None else matching & in_scope)
        return masks, exact

    def ordered(self, scope: Scope, query: ListQuery, now: int | None) -> list[MemoryRecord]:
        node, order, limit = query.filter, query.order, query.limit
        after_us = None if query.after is None else epoch_micros(query.after)
        before_us = None if query.before is None else epoch_micros(query.before)
        selection = self.select(scope, now, node)
        masks, exact = self._row_masks(selection, node)
        if len(selection) == 1:
            partition, mask = selection[0][0], masks[0]
            rows = partition.rows_in_order(order, after_us, before_us)
            if mask is not None:
                rows = _masked_head(rows, mask, limit if exact else None)
            candidates: Iterator[MemoryRecord] = (partition.record(row) for row in rows)
        else:
            candidates = self._merged_in_order(selection, masks, order, after_us, before_us)
        if exact:
            return list(itertools.islice(candidates, limit))
        matching = (record for record in candidates if evaluate(node, record))
        return list(itertools.islice(matching, limit))

    @staticmethod
    def _merged_in_order(
        selection: Selection,
        masks: list[npt.NDArray[np.bool_] | None],
        order: Order,
        after: int | None,
        before: int | None,
    ) -> Iterator[MemoryRecord]:
        if not selection:
            return iter(())
        parts = [partition for partition, _ in selection]
        stamps = np.concatenate([p.timestamps[: p.size] for p in parts])
        high = np.concatenate([p.id_high[: p.size] for p in parts])
        low = np.concatenate([p.id_low[: p.size] for p in parts])
        owners = np.concatenate([np.full(p.size, i, dtype=np.intp) for i, p in enumerate(parts)])
        rows = np.concatenate([np.arange(p.size, dtype=np.intp) for p in parts])
        selected = np.concatenate(
            [np.ones(p.size, dtype=bool) if m is None else m for p, m in zip(parts, masks, strict=True)]
        )
        if after is not None:
            selected &= stamps > after
        if before is not None:
            selected &= stamps < before
        candidates = np.flatnonzero(selected)
        positions = candidates[np.lexsort((low[candidates], high[candidates], stamps[candidates]))]
        if order == "desc":
            positions = positions[::-1]
        return (parts[owners[p]].record(rows[p]) for p in positions)

    def search(self, scope: Scope, request: SearchQuery, now: int | None) -> list[ScoredRecord]:
        query, text, node, limit = request.vector, request.text, request.filter, request.limit
        if query is None:
            newest = self.ordered(scope, ListQuery(node, "desc"), now)
            matching = (r for r in newest if text is not None and text_matches(text, r.message.content))
            return [ScoredRecord.of(r, 1.0) for r in itertools.islice(matching, limit)]
        if self.dimension is None:  # bound to an embedder, but no vector written yet
            return []
        selection = [(p, m) for p, m in self.select(scope, now, node) if p.size]
        if not selection:
            return []
        parts = [partition for partition, _ in selection]
        masks, exact = self._row_masks(selection, node)
        vector = query[0]
        row_sets: list[npt.NDArray[np.intp] | None] = []
        score_sets, owners = [], []
        with single_blas_thread():
            for partition, mask in zip(parts, masks, strict=True):
                scored = _scored_rows(partition, mask, vector)
                if scored is not None:
                    owners.append(partition)
                    row_sets.append(scored[0])
                    score_sets.append(scored[1])
        if not owners:
            return []
        scores = score_sets[0] if len(score_sets) == 1 else np.concatenate(score_sets)
        if exact and text is None and len(scores) > limit:
            best = np.argpartition(-scores, limit - 1)[:limit]
            ranked = best[np.argsort(-scores[best], kind="stable")]
        else:
            ranked = np.argsort(-scores, kind="stable")
        # Where each partition's candidates start in ``scores``: a position maps back to its
        # partition and row only for the few ranked hits, not for every candidate.
        starts = list(itertools.accumulate((len(scored) for scored in score_sets), initial=0))
        hits: list[ScoredRecord] = []
        for position in ranked.tolist():
            owner = bisect.bisect_right(starts, position) - 1
            rows, row = row_sets[owner], position - starts[owner]
            record = owners[owner].record(row if rows is None else int(rows[row]))
            if text is not None and not text_matches(text, record.message.content):
                continue
            if not exact and not evaluate(node, record):
                continue
            hits.append(ScoredRecord.of(record, clamp_score(scores[position])))
            if len(hits) == limit:
                break
        return hits

    def keyword_search(self, scope: Scope, query: KeywordQuery, now: int | None) -> list[ScoredRecord] | None:
        """BM25 over the records of ``scope`` matching the query's filter, from the partitions' postings.

        The same scores and order (newest first among equals) as the exact scan of
        :meth:`memcore.store.BaseStore._keyword_search`; ``None`` when the filter tests
        more than role and kind, which only that scan can evaluate.
        """
        keywords, node, limit = query.keywords, query.filter, query.limit
        selection = self.select(scope, now, node)
        masks, exact = self._row_masks(selection, node)
        if not exact:
            return None
        wanted = set(terms(keywords))
        documents, total_length = 0, 0
        found: list[dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]]] = []
        frequency = dict.fromkeys(wanted, 0)
        for (partition, _), mask in zip(selection, masks, strict=True):
            postings = partition.postings()
            lengths = postings.lengths[: partition.size]
            documents += partition.size if mask is None else int(mask.sum())
            total_length += int(lengths.sum() if mask is None else lengths[mask].sum())
            in_partition = {}
            for term in wanted:
                entries = postings.entries(term)
                if entries is None:
                    continue
                rows, counts = entries
                if mask is not None:
                    keep = mask[rows]
                    rows, counts = rows[keep], counts[keep]
                if len(rows):
                    in_partition[term] = (rows, counts)
                    frequency[term] += len(rows)
            found.append(in_partition)
        if not documents:
            return []
        average = total_length / documents or 1.0
        weights = {term: idf(documents, seen) for term, seen in frequency.items() if seen}
        scored: list[tuple[Partition, npt.NDArray[np.intp], npt.NDArray[np.float64]]] = []
        for (partition, _), in_partition in zip(selection, found, strict=True):
            if in_partition:
                scores = np.zeros(partition.size)
                lengths = partition.postings().lengths
                for term, (rows, counts) in in_partition.items():
                    scores[rows] += term_score(weights[term], counts, lengths[rows], average)  # type: ignore[arg-type]
                rows = np.flatnonzero(scores)
                scored.append((partition, rows, scores[rows]))
        if not scored:
            return []
        scores = np.concatenate([s for _, _, s in scored])
        stamps = np.concatenate([p.timestamps[rows] for p, rows, _ in scored])
        high = np.concatenate([p.id_high[rows] for p, rows, _ in scored])
        low = np.concatenate([p.id_low[rows] for p, rows, _ in scored])
        owners = np.concatenate([np.full(len(rows), i) for i, (_, rows, _) in enumerate(scored)])
        rows = np.concatenate([rows for _, rows, _ in scored])
        order = np.lexsort((low, high, stamps, scores))[::-1][:limit]  # best first, then newest first
        best = zip(owners[order].tolist(), rows[order].tolist(), scores[order].tolist(), strict=True)
        return [ScoredRecord.of(scored[owner][0].record(row), score) for owner, row, score in best]

    def _matching(
        self, scope: Scope, node: Filter | None, now: int | None
    ) -> Iterator[tuple[Partition, int]]:
        """The partition and row of each record visible through ``scope`` that matches ``node``."""
        selection = self.select(scope, now, node)
        masks, exact = self._row_masks(selection, node)
        for (partition, _), mask in zip(selection, masks, strict=True):
            rows = range(partition.size) if mask is None else np.flatnonzero(mask).tolist()
            for row in rows:
                if exact or evaluate(node, partition.record(row)):
                    yield partition, row

    def count(self, scope: Scope, node: Filter | None, now: int | None) -> int:
        selection = self.select(scope, now, node)
        masks, exact = self._row_masks(selection, node)
        if exact:
            return sum(
                p.size if m is None else int(m.sum()) for (p, _), m in zip(selection, masks, strict=True)
            )
        return sum(1 for _ in self._matching(scope, node, now))

    def matching_keys(self, scope: Scope, node: Filter | None) -> list[RecordKey]:
        """The scope and id of each record visible through ``scope`` that matches ``node``, expired or not."""
        return [(p.scope_of(row), p.record_id(row)) for p, row in self._matching(scope, node, None)]

    def visible_keys(self, scope: Scope, ids: list[UUID]) -> list[RecordKey]:
        """The scope and id of each record of ``ids`` visible through ``scope``, expired or not."""
        return [(p.scope_of(row), p.record_id(row)) for p, row in self._rows(scope, ids, None)]

    def remove(self, keys: list[RecordKey]) -> None:
        """Remove records by scope and id (keys not present are ignored)."""
        for scope, record_id in keys:
            key = _owner_key(scope)
            partition = self._partitions.get(key)
            session, number = session_code(scope.session_id), record_id.int
            if partition is None or partition.row_of(session, number) is None:
                continue
            partition.remove(session, number)
            self._size -= 1
            if partition.size == 0:
                self._drop_partition(key)

    def scope_rows(self, scope: Scope) -> Rows:
        """The records whose scope is exactly ``scope``, in columns (expired ones too)."""
        partition = self._partitions.get(_owner_key(scope))
        if partition is None:
            return Rows.empty(self.dimension)
        rows = np.flatnonzero(partition.exact_session_mask(scope.session_id))
        return partition.export(rows, with_vectors=self.dimension is not None)

    def load_rows(self, scope: Scope, rows: Rows) -> None:
        """Insert the records of ``rows``, all of exactly ``scope`` (as :meth:`scope_rows` gives them),
        without decoding them.

        :raises StoreCorruptedError: if an id appears twice, or is stored in ``scope`` already.
        """
        if not len(rows):
            return
        if rows.vectors is not None:
            check_same_dimension(self.dimension, rows.vectors.shape[1])
            self._take_dimension(rows.vectors.shape[1])
        key = _owner_key(scope)
        found = self._partitions.get(key)
        if found is None:
            self._unindexed.append(key)
        partition = found or self._new_partition(key, keywords=False)
        try:
            loaded = partition.load(scope, rows)
        finally:
            if partition.size == 0:
                self._drop_partition(key)
        self._size += len(loaded)

    def build_keyword_index(self, partitions: int) -> bool:
        """Build the keyword index of up to ``partitions`` partitions loaded without one
        (:meth:`load_rows`); whether any is left. A store calls it in the background after
        loading, so the first hybrid recall of an agent does not build its index."""
        while partitions and self._unindexed:
            partition = self._partitions.get(self._unindexed.pop())
            if partition is not None and not partition.has_postings:
                partition.postings()
                partitions -= 1
        return bool(self._unindexed)

    def scope_size(self, scope: Scope) -> int:
        """How many records have exactly ``scope``."""
        partition = self._partitions.get(_owner_key(scope))
        return 0 if partition is None else int(partition.exact_session_mask(scope.session_id).sum())


def _holding(partitions: list[Partition], ids: list[UUID]) -> list[Partition]:
    """The partitions among ``partitions`` whose id column holds the low 64 bits of one of ``ids``
    (a superset of those holding the ids), found in one vectorised pass over the columns."""
    wanted = np.fromiter((record_id.int & ID_LOW_BITS for record_id in ids), dtype=np.uint64, count=len(ids))
    sizes = np.fromiter((p.size for p in partitions), dtype=np.intp, count=len(partitions))
    found = np.flatnonzero(np.isin(np.concatenate([p.id_low[: p.size] for p in partitions]), wanted))
    owners = np.unique(np.searchsorted(np.cumsum(sizes), found, side="right"))
    return [partitions[owner] for owner in owners.tolist()]


def _scored_rows(
    partition: Partition, mask: npt.NDArray[np.bool_] | None, vector: Matrix
) -> tuple[npt.NDArray[np.intp] | None, npt.NDArray[np.float32]] | None:
    """The rows of ``partition`` a search scores (those in ``mask`` with a vector; ``None``: every
    row, in order) and their products with ``vector``; ``None`` if no row is left."""
    usable = partition.has_vector[: partition.size]
    selected = usable if mask is None else usable & mask
    if selected.all():  # the common case: no gather, and no row numbers to map the hits back
        return None, partition.vectors.products(vector, partition.size)
    rows = np.flatnonzero(selected)
    if not len(rows):
        return None
    if len(rows) <= _GATHER_FRACTION * partition.size:
        return rows, partition.vectors.take(rows) @ vector
    return rows, partition.vectors.products(vector, partition.size)[rows]


def _masked_head(
    rows: npt.NDArray[np.intp], mask: npt.NDArray[np.bool_], wanted: int | None
) -> npt.NDArray[np.intp]:
    """The rows ``mask`` keeps, in order; when only the first ``wanted`` are needed, a dense mask
    is tested on a short head of ``rows`` first (a neighbour read wants one row of thousands)."""
    if wanted is not None:
        head = rows[: 4 * wanted + 32]
        kept = head[mask[head]]
        if len(kept) >= wanted or len(head) == len(rows):
            return kept
    return rows[mask[rows]]


def _listing_order(key: OwnerKey) -> tuple[str, str, str]:
    """Partitions are read in the order of their owners' fields, unset ones first."""
    return (key[0] or "", key[1] or "", key[2] or "")


def _owner_key(scope: Scope) -> OwnerKey:
    return (scope.tenant, scope.user_id, scope.agent_id)
