"""The built-in index's columns: metadata masks mean what the reference evaluator means, vector
blocks hold and score rows as one matrix would, and rows travel out and back in unchanged."""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import signal
import threading
import time
import weakref
from datetime import UTC, datetime
from uuid import UUID

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore.errors import StoreCorruptedError
from memcore.filters import evaluate, parse_filter
from memcore.queries import ListQuery, SearchQuery
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores import vector_blocks
from memcore.stores.metadata_columns import MetadataColumn, covers_test
from memcore.stores.partition import whole_test
from memcore.stores.scoped_index import ScopedIndex
from memcore.stores.vector_blocks import (
    BLOCK_ROWS,
    MAPPED_BYTES,
    SLAB_BLOCKS,
    BlockPool,
    VectorBlocks,
    mapped_blocks,
)

SCOPE = Scope(tenant="t", user_id="u", agent_id="a", session_id="s")
BIG = 2**53 + 1

values = st.one_of(
    st.just(None),  # no such key
    st.sampled_from(["x", "y", "", "1"]),
    st.booleans(),
    st.sampled_from([0, 1, -1, 2, 1.0, 0.5, -0.0, BIG, 2**53, 2**60]),
    st.lists(st.sampled_from(["x", "y", "z"]), max_size=3),
)
operands = st.one_of(
    st.sampled_from(["x", "y", "1", ""]), st.booleans(), st.sampled_from([0, 1, 1.0, 0.5, -1, BIG, 2**53])
)
comparisons = st.one_of(
    st.builds(lambda op, v: {"metadata.k": {op: v}}, st.sampled_from(["$eq", "$ne"]), operands),
    st.builds(
        lambda op, vs: {"metadata.k": {op: vs}},
        st.sampled_from(["$in", "$nin"]),
        st.lists(operands, max_size=4),
    ),
    st.builds(
        lambda op, v: {"metadata.k": {op: v}},
        st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
        st.sampled_from([0, 1, 0.5, -1, BIG, 2**53]),
    ),
    st.builds(lambda v: {"metadata.k": {"$exists": v}}, st.booleans()),
    st.builds(lambda v: {"metadata.k": {"$contains": v}}, st.sampled_from(["x", "z"])),
)
# Compound filters too: a partition is skipped when its bounds rule a whole conjunction out.
filters = st.one_of(
    comparisons,
    st.builds(lambda a, b: {"$and": [a, b]}, comparisons, comparisons),
    st.builds(lambda a, b: {"$or": [a, b]}, comparisons, comparisons),
    st.builds(lambda a: {"$not": a}, comparisons),
)


def _record(value: object, number: int) -> MemoryRecord:
    metadata = {} if value is None else {"k": value}
    return MemoryRecord(scope=SCOPE, message=Message(role="user", content=f"m{number}"), metadata=metadata)


@settings(max_examples=150, deadline=None)
@given(st.lists(values, min_size=1, max_size=12), st.lists(st.integers(0, 11), max_size=4), filters)
def test_metadata_masks_match_the_reference_evaluator(
    stored: list[object], removed: list[int], spec: dict[str, object]
) -> None:
    index = ScopedIndex()
    records = [_record(value, number) for number, value in enumerate(stored)]
    index.upsert(records, None)
    node = parse_filter(spec)
    index.count(SCOPE, node, None)  # builds the column, so the removals below maintain it
    gone = {records[i].id for i in removed if i < len(records)}
    index.remove([(SCOPE, record_id) for record_id in gone])
    kept = [r for r in records if r.id not in gone]
    expected = {r.id for r in kept if evaluate(node, r)}
    assert {r.id for r in index.ordered(SCOPE, ListQuery(node, "asc"), None)} == expected
    assert index.count(SCOPE, node, None) == len(expected)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, -1, 2, 1.0, 0.5, -0.0, BIG, 2**53]), min_size=1, max_size=12),
    st.lists(values, max_size=2),
    st.lists(st.integers(0, 13), max_size=4),
    filters,
)
def test_columns_of_numbers_taken_whole_on_their_bounds_match_the_reference_evaluator(
    numbers: list[object], others: list[object], removed: list[int], spec: dict[str, object]
) -> None:
    """Mostly columns of numbers alone, whose partition a range may take whole on its bounds and
    counts (no mask): with a few other rows, and rows removed after the column was built."""
    index = ScopedIndex()
    records = [_record(value, number) for number, value in enumerate([*numbers, *others])]
    vectors = np.random.default_rng(len(records)).standard_normal((len(records), 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index.upsert(records, vectors)
    node = parse_filter(spec)
    index.count(SCOPE, node, None)  # builds the column, so the removals below maintain it
    gone = {records[i].id for i in removed if i < len(records)}
    index.remove([(SCOPE, record_id) for record_id in gone])
    expected = {r.id for r in records if r.id not in gone and evaluate(node, r)}
    assert {r.id for r in index.ordered(SCOPE, ListQuery(node, "asc"), None)} == expected
    assert index.count(SCOPE, node, None) == len(expected)
    found = index.search(SCOPE, SearchQuery(vectors[:1], None, node, len(records)), None)
    assert {hit.record.id for hit in found} == expected


def test_a_nan_a_foreign_snapshot_may_hold_never_lets_a_range_take_its_column_whole() -> None:
    column = MetadataColumn(4)
    for row, value in enumerate([1.0, math.nan, 3]):
        column.set(row, value)
    covers = covers_test("$gte", 0)
    assert column.number_rows == 2 and not covers(column, 3)  # NaN >= 0 is false for the evaluator
    column.move(2, 1)  # the NaN row deleted: the last row takes its place
    assert column.number_rows == 2 and covers(column, 2)
    column.set(0, math.nan)
    column.clear(0)
    assert column.number_rows == 1


def test_a_range_holding_every_row_takes_the_partition_whole_without_a_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = ScopedIndex()
    records = [_record(number, number) for number in range(10)]
    index.upsert(records, np.eye(10, 16, dtype=np.float32))
    whole = {
        op: parse_filter({"metadata.k": {op: value}}) for op, value in (("$lt", 10), ("$lte", 9), ("$gte", 0))
    }
    partial = [parse_filter({"metadata.k": {op: value}}) for op, value in (("$lt", 9), ("$gt", 0))]
    partition = index.select(SCOPE, None, whole["$lt"])[0][0]

    def no_mask(node: object) -> None:
        raise AssertionError("a mask was built")

    with monkeypatch.context() as patched:
        patched.setattr(partition, "mask", no_mask)
        for node in whole.values():
            assert whole_test(node)(partition) and index.count(SCOPE, node, None) == 10
            assert (
                len(index.search(SCOPE, SearchQuery(np.eye(1, 16, dtype=np.float32), None, node, 10), None))
                == 10
            )
        both = parse_filter({"$and": [{"metadata.k": {"$lt": 10}}, {"metadata.k": {"$gte": 0}}]})
        assert whole_test(both)(partition) and index.count(SCOPE, both, None) == 10
    for node in partial:
        assert not whole_test(node)(partition) and index.count(SCOPE, node, None) == 9
    odd = _record("ten", 10)
    index.upsert([odd], np.eye(1, 16, dtype=np.float32))  # a row without a number
    assert not whole_test(whole["$lt"])(partition) and index.count(SCOPE, whole["$lt"], None) == 10
    index.remove([(SCOPE, odd.id)])
    assert whole_test(whole["$lt"])(partition)
    index.upsert([records[3].model_copy(update={"metadata": {}})], np.eye(1, 16, dtype=np.float32))
    assert not whole_test(whole["$lt"])(partition) and index.count(SCOPE, whole["$lt"], None) == 9
    index.upsert([records[3].model_copy(update={"metadata": {"k": BIG}})], np.eye(1, 16, dtype=np.float32))
    assert not whole_test(parse_filter({"metadata.k": {"$lt": 2**60}}))(partition)  # BIG is inexact


@settings(max_examples=100, deadline=None)
@given(st.lists(values, min_size=1, max_size=12), filters)
def test_a_wide_filtered_read_skips_only_owners_where_no_row_matches(
    stored: list[object], spec: dict[str, object]
) -> None:
    """Records spread over three owners: a tenant-wide list, count and search skip an owner on its
    bounds alone, and still return exactly what the reference evaluator keeps, in owner order."""
    owners = [Scope(tenant="t", user_id=f"u{n}", agent_id="a") for n in range(3)]
    records = [
        _record(value, number).model_copy(update={"scope": owners[number % 3]})
        for number, value in enumerate(stored)
    ]
    index = ScopedIndex()
    vectors = np.random.default_rng(len(stored)).standard_normal((len(records), 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index.upsert(records, vectors)
    node, tenant = parse_filter(spec), Scope(tenant="t")
    expected = [r.id for r in records if evaluate(node, r)]
    listed = index.ordered(tenant, ListQuery(node, "asc"), None)
    assert sorted(r.id for r in listed) == sorted(expected)
    assert index.count(tenant, node, None) == len(expected)
    found = index.search(tenant, SearchQuery(vectors[:1], None, node, len(records)), None)
    assert sorted(hit.record.id for hit in found) == sorted(expected)
    selected = [partition.owner for partition, _ in index.select(tenant, None, node)]
    assert selected == sorted(selected, key=lambda owner: owner[1] or "")


def test_a_partition_no_row_can_match_is_skipped_without_reading_its_rows() -> None:
    index = ScopedIndex()
    owners = [Scope(tenant="t", user_id=f"u{n}") for n in range(3)]
    message = Message(role="user", content="m")
    index.upsert(
        [
            MemoryRecord(scope=o, message=message, metadata={"k": n, "s": f"v{n}"})
            for n, o in enumerate(owners)
        ],
        None,
    )

    def selected(spec: dict[str, object]) -> list[Scope]:
        return [p.scope_of(0) for p, _ in index.select(Scope(tenant="t"), None, parse_filter(spec))]

    assert selected({"metadata.k": {"$gte": 2}}) == [owners[2]]
    assert selected({"metadata.s": "v1"}) == [owners[1]]
    assert selected({"metadata.k": {"$lt": 0}}) == []
    assert selected({"$not": {"metadata.k": {"$lt": 0}}}) == owners


def test_the_owners_left_after_skipping_are_read_in_the_order_of_their_fields() -> None:
    index = ScopedIndex()
    owners = [Scope(tenant="t", user_id=f"u{n:02}") for n in range(24)]
    message = Message(role="user", content="m")
    index.upsert(
        [
            MemoryRecord(scope=o, message=message, metadata={"k": n})
            for n, o in reversed(list(enumerate(owners)))
        ],
        None,
    )
    node = parse_filter({"metadata.k": {"$gte": 4}})
    selected = [p.scope_of(0) for p, _ in index.select(Scope(tenant="t"), None, node)]
    assert selected == owners[4:]


def test_a_column_declines_numbers_float64_cannot_hold_and_answers_the_rest() -> None:
    column = MetadataColumn(4)
    for row, value in enumerate(["a", 3, BIG, ["a", "b"]]):
        column.set(row, value)
    assert column.mask("$eq", 3, 4) is None  # an int beyond 2**53 is in the column
    assert column.mask("$gt", 2**53, 4) is None  # as float64, 2**53 + 1 would not be greater
    assert column.mask("$eq", "a", 4).tolist() == [True, False, False, True]
    assert column.mask("$exists", True, 4).tolist() == [True] * 4
    column.clear(2)
    assert column.mask("$eq", 3, 4).tolist() == [False, True, False, False]
    column.move(3, 2)
    assert column.mask("$contains", "b", 4).tolist() == [False, False, True, False]


def test_vector_blocks_hold_and_score_rows_as_one_matrix_would() -> None:
    rng = np.random.default_rng(0)
    rows = 3 * BLOCK_ROWS + 17
    matrix = rng.standard_normal((rows, 8)).astype(np.float32)
    blocks = VectorBlocks(8)
    blocks.reserve(5)
    blocks.set_rows(0, matrix[:5])
    blocks.reserve(rows)
    blocks.set_rows(5, matrix[5:])
    assert blocks.capacity == 4 * BLOCK_ROWS  # never more than one block spare
    query = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(blocks.products(query, rows), matrix @ query, rtol=1e-5, atol=1e-5)
    picked = rng.choice(rows, 50, replace=False)
    np.testing.assert_array_equal(blocks.take(picked), matrix[picked])
    blocks.move(rows - 1, 3)
    np.testing.assert_array_equal(blocks.row(3), matrix[rows - 1])
    assert not blocks.row(rows - 1).any()


def test_whole_blocks_the_first_too_are_cut_from_slabs_large_enough_for_huge_pages() -> None:
    gc.collect()
    before = mapped_blocks()
    pool = BlockPool(384)
    blocks = VectorBlocks(384, pool)
    blocks.reserve(4 * BLOCK_ROWS)  # the first block doubles to a whole one, then three more
    whole = blocks.blocks
    assert len({id(block.base) for block in whole}) == 1 and all(len(b) == BLOCK_ROWS for b in whole)
    assert whole[0].base.nbytes >= SLAB_BLOCKS * BLOCK_ROWS * 384 * 4 >= 4 << 20  # numpy madvises from 4 MiB
    assert whole[0].ctypes.data % (2 << 20) == 0  # on a huge page's boundary
    gc.collect()
    assert pool.free == SLAB_BLOCKS - 4 and mapped_blocks() == before  # the sizes it grew through, unmapped
    alone = VectorBlocks(384)
    alone.reserve(2 * BLOCK_ROWS)
    assert all(block.base is None for block in alone.blocks)


def test_blocks_given_back_are_handed_out_again_zeroed() -> None:
    pool = BlockPool(8)
    keeper = VectorBlocks(8, pool)
    keeper.reserve(2 * BLOCK_ROWS)  # holds two blocks of the slab, which so stays
    first = VectorBlocks(8, pool)
    first.reserve(3 * BLOCK_ROWS)
    first.set_rows(0, np.ones((3 * BLOCK_ROWS, 8), dtype=np.float32))
    held = first.blocks
    first.release()
    assert (pool.free, pool.slabs) == (SLAB_BLOCKS - 2, 1) and first.capacity < BLOCK_ROWS
    second = VectorBlocks(8, pool)
    second.reserve(3 * BLOCK_ROWS)
    assert {block.ctypes.data for block in second.blocks} == {block.ctypes.data for block in held}
    assert not any(block.any() for block in second.blocks)
    first.reserve(5)  # usable again, as new
    first.set_rows(0, np.ones((5, 8), dtype=np.float32))
    assert first.products(np.ones(8, dtype=np.float32), 5).tolist() == [8.0] * 5


def test_a_slab_whose_blocks_are_all_back_is_let_go() -> None:
    pool = BlockPool(8)
    blocks = VectorBlocks(8, pool)
    blocks.reserve(3 * BLOCK_ROWS)
    memory = weakref.ref(blocks.blocks[1].base)
    assert pool.slabs == 1
    blocks.release()
    gc.collect()
    assert (pool.slabs, pool.free) == (0, 0) and memory() is None


def test_a_growing_first_block_is_a_private_mapping_given_back_when_outgrown() -> None:
    gc.collect()
    before = mapped_blocks()
    pool = BlockPool(384)
    blocks = VectorBlocks(384, pool)
    blocks.reserve(100)  # 128 rows, 192 KiB
    mapped = blocks.blocks[0]
    assert mapped.base is not None and mapped.nbytes >= MAPPED_BYTES and mapped_blocks() == before + 1
    assert mapped.flags.writeable and mapped.flags.c_contiguous and not mapped.any()
    blocks.set_rows(0, np.full((100, 384), 2.0, dtype=np.float32))
    child = os.fork()
    if child == 0:  # a forked worker writing its copy must not reach the parent's rows
        blocks.set_rows(0, np.zeros((100, 384), dtype=np.float32))
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    assert (blocks.blocks[0][:100] == 2.0).all()
    outgrown = weakref.ref(mapped.base)
    del mapped
    blocks.reserve(300)  # 512 rows: the 128-row mapping is unmapped, its rows copied
    gc.collect()
    assert outgrown() is None and mapped_blocks() == before + 1 and (blocks.blocks[0][:100] == 2.0).all()
    blocks.reserve(BLOCK_ROWS)
    gc.collect()
    assert mapped_blocks() == before and pool.free == SLAB_BLOCKS - 1  # now a slab's block
    small = VectorBlocks(384, pool)
    small.reserve(20)  # 32 rows, 48 KiB: from the heap
    assert small.blocks[0].base is None and mapped_blocks() == before


def test_first_blocks_past_the_process_mappings_come_from_the_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.collect()
    monkeypatch.setattr(vector_blocks, "MAPPED_BLOCKS_KEPT", mapped_blocks() + 2)
    owners = [VectorBlocks(384, BlockPool(384)) for _ in range(3)]  # a pool each: the count is the process's
    for blocks in owners:
        blocks.reserve(200)
    assert [blocks.blocks[0].base is None for blocks in owners] == [False, False, True]
    owners[0].release()
    gc.collect()
    owners[2].reserve(400)  # room for a mapping again
    assert owners[2].blocks[0].base is not None


def test_a_forked_child_maps_blocks_though_a_parent_thread_held_the_count_lock() -> None:
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with vector_blocks._MAPPINGS._lock:
            held.set()
            done.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        child = os.fork()
        if child == 0:  # a worker forked while another thread counted a mapping
            blocks = VectorBlocks(384, BlockPool(384))
            blocks.reserve(100)
            os._exit(0 if blocks.blocks[0].base is not None else 1)
        deadline = time.monotonic() + 20
        while (ended := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if ended[0] == 0:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked child hung on the lock a parent thread held")
        assert ended[1] == 0
    finally:
        done.set()
        holder.join()


def test_a_mapping_is_counted_until_its_memory_goes_however_its_store_ends() -> None:
    gc.collect()
    before = mapped_blocks()
    index = ScopedIndex()
    records = [MemoryRecord(scope=SCOPE, message=Message(role="user", content=f"r{i}")) for i in range(100)]
    index.upsert(records, np.eye(100, 384, dtype=np.float32))
    assert mapped_blocks() == before + 1
    del index  # dropped whole, as a closed store drops its index: nothing is given back
    gc.collect()
    assert mapped_blocks() == before


def test_an_owner_emptied_lets_its_blocks_go_and_the_next_owner_searches_exactly() -> None:
    rng = np.random.default_rng(2)
    count = 2 * BLOCK_ROWS + 5
    vectors = rng.standard_normal((2 * count, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    gone, kept = SCOPE, Scope(tenant="t", user_id="v")
    first = [MemoryRecord(scope=gone, message=Message(role="user", content=f"a{i}")) for i in range(count)]
    second = [MemoryRecord(scope=kept, message=Message(role="user", content=f"b{i}")) for i in range(count)]
    index = ScopedIndex()
    index.upsert(first, vectors[:count])
    pool = index._blocks
    assert pool is not None and (pool.slabs, pool.free) == (1, SLAB_BLOCKS - 3)
    index.remove([(gone, record.id) for record in first])
    assert (pool.slabs, pool.free) == (0, 0)  # the emptied owner's blocks given back, the slab let go
    index.upsert(second, vectors[count:])
    query = SearchQuery(vector=vectors[count + 3][None, :], text=None, filter=None, limit=3)
    assert index.search(kept, query, None)[0].record.id == second[3].id
    assert index.search(gone, query, None) == []


def test_rows_written_before_the_first_vector_move_into_pool_blocks() -> None:
    """A store bound to no dimension yet keeps placeholder rows; the first vectors give every
    partition its width and its blocks from the pool, which get all of them back at the end."""
    rng = np.random.default_rng(3)
    owner = Scope(tenant="t", user_id="u")
    early = [
        MemoryRecord(scope=owner, message=Message(role="user", content="x")) for _ in range(BLOCK_ROWS + 100)
    ]
    later = [MemoryRecord(scope=owner, message=Message(role="user", content="y")) for _ in range(BLOCK_ROWS)]
    vectors = rng.standard_normal((len(later), 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = ScopedIndex()
    index.upsert(early, None)
    index.upsert(later, vectors)
    pool = index._blocks
    assert pool is not None and pool.slabs == 1
    query = SearchQuery(vector=vectors[5][None, :], text=None, filter=None, limit=3)
    assert index.search(owner, query, None)[0].record.id == later[5].id
    index.remove([(owner, record.id) for record in [*later, *early]])
    assert (pool.slabs, pool.free) == (0, 0)


def test_hits_map_back_to_their_rows_across_wholly_and_partly_selected_owners() -> None:
    """One owner selected whole (scored without row numbers) between owners selected in part, by
    the filter or by rows without a vector: every hit is the record its score belongs to."""
    rng = np.random.default_rng(4)
    records, vectors, has_vector = [], [], []
    for user, size in (("u0", 300), ("u1", 50), ("u2", 400), ("u3", 20)):
        for i in range(size):
            bucket = 0 if user in ("u0", "u2") else i % 2
            records.append(
                MemoryRecord(
                    scope=Scope(tenant="t", user_id=user),
                    message=Message(role="user", content=f"{user}-{i}"),
                    metadata={"b": bucket},
                )
            )
            has_vector.append(user != "u2" or i % 3 > 0)
    vectors = rng.standard_normal((len(records), 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = ScopedIndex()
    index.upsert(records, vectors, np.array(has_vector))
    node = parse_filter({"metadata.b": 0})
    for probe in range(20):
        query = vectors[rng.integers(len(records))]
        hits = index.search(Scope(tenant="t"), SearchQuery(query[None, :], None, node, 25), None)
        candidates = [i for i, record in enumerate(records) if has_vector[i] and record.metadata["b"] == 0]
        best = sorted(candidates, key=lambda i: -float(vectors[i] @ query))[:25]
        assert [hit.record.id for hit in hits] == [records[i].id for i in best], probe
        for hit, i in zip(hits, best, strict=True):
            assert hit.score == pytest.approx(float(vectors[i] @ query), abs=1e-5)


def test_a_partition_over_several_blocks_searches_deletes_and_exports_exactly() -> None:
    rng = np.random.default_rng(1)
    count = 2 * BLOCK_ROWS + 5
    vectors = rng.standard_normal((count, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    records = [
        MemoryRecord(scope=SCOPE, message=Message(role="user", content=f"m{i}"), metadata={"b": i % 100})
        for i in range(count)
    ]
    index = ScopedIndex()
    index.upsert(records, vectors)
    gone = [records[i].id for i in range(0, count, 7)]
    index.remove([(SCOPE, record_id) for record_id in gone])
    alive = [i for i in range(count) if i % 7]
    for spec in (None, {"metadata.b": {"$lt": 3}}, {"metadata.b": {"$lt": 60}}):
        node = None if spec is None else parse_filter(spec)
        query = SearchQuery(vector=vectors[alive[10]][None, :], text=None, filter=node, limit=10)
        hits = [hit.record.id for hit in index.search(SCOPE, query, None)]
        candidates = [i for i in alive if node is None or evaluate(node, records[i])]
        best = sorted(candidates, key=lambda i: -float(vectors[i] @ vectors[alive[10]]))[:10]
        assert hits == [records[i].id for i in best]
    exported = index.scope_rows(SCOPE)
    copy = ScopedIndex()
    copy.load_rows(SCOPE, exported)
    assert len(copy) == len(alive)
    ids = [records[i].id for i in alive]
    assert copy.get(SCOPE, ids, None) == index.get(SCOPE, ids, None)
    assert dict((i, v.tolist()) for i, v in copy.vectors(SCOPE, ids, None)) == dict(
        (i, v.tolist()) for i, v in index.vectors(SCOPE, ids, None)
    )


def test_loaded_rows_repeating_an_id_are_refused_whole() -> None:
    index = ScopedIndex()
    record = _record("x", 1)
    index.upsert([record], None)
    rows = index.scope_rows(SCOPE)
    fresh = ScopedIndex()
    doubled = dataclasses.replace(
        rows,
        **{
            name: rows.encoded * 2 if name == "encoded" else np.repeat(getattr(rows, name), 2, axis=0)
            for name in ("encoded", "ids", "created", "expires", "roles", "kinds", "vectors", "has_vector")
            if getattr(rows, name) is not None
        },
    )
    with pytest.raises(StoreCorruptedError):
        fresh.load_rows(SCOPE, doubled)
    assert len(fresh) == 0
    fresh.load_rows(SCOPE, rows)
    with pytest.raises(StoreCorruptedError):
        fresh.load_rows(SCOPE, rows)  # already there
    assert fresh.get(SCOPE, [record.id], None) == [record]


def test_records_of_one_time_are_listed_by_their_whole_id() -> None:
    """Ids that differ only in their low 64 bits, in one partition and across two."""
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [UUID(int=(7 << 64) | low) for low in (3, 1, 2)]
    index = ScopedIndex()
    index.upsert(
        [
            MemoryRecord(id=i, scope=SCOPE, created_at=moment, message=Message(role="user", content="m"))
            for i in ids
        ],
        None,
    )
    assert [r.id for r in index.ordered(SCOPE, ListQuery(None, "asc"), None)] == sorted(ids)
    other = Scope(tenant="t", user_id="v")
    first = UUID(int=7 << 64)
    index.upsert(
        [MemoryRecord(id=first, scope=other, created_at=moment, message=Message(role="user", content="m"))],
        None,
    )
    listed = index.ordered(Scope(tenant="t"), ListQuery(None, "desc"), None)
    assert [r.id for r in listed] == sorted([*ids, first], reverse=True)


def test_a_limited_list_of_a_sparse_session_reads_past_the_head_of_its_partition() -> None:
    index = ScopedIndex()
    busy, rare = SCOPE, SCOPE.model_copy(update={"session_id": "rare"})
    records = [
        MemoryRecord(scope=rare if n % 97 == 5 else busy, message=Message(role="user", content=f"m{n}"))
        for n in range(300)
    ]
    index.upsert(records, None)
    expected = [r.id for r in records if r.scope == rare]
    for order, wanted in (("asc", expected), ("desc", expected[::-1])):
        for limit in (1, 2, 3, 4):
            query = ListQuery(None, order, limit)  # type: ignore[arg-type]
            assert [r.id for r in index.ordered(rare, query, None)] == wanted[:limit]
    assert [r.id for r in index.ordered(busy, ListQuery(None, "desc", 2), None)] == [
        records[-1].id,
        records[-2].id,
    ]


def test_a_wide_read_of_many_ids_finds_each_in_every_owner_holding_it() -> None:
    index = ScopedIndex()
    owners = [Scope(tenant="t", user_id=f"u{n}", agent_id="a") for n in range(600)]
    records = [
        MemoryRecord(scope=o, message=Message(role="user", content="m")) for o in owners for _ in range(3)
    ]
    shared = records[7].model_copy(update={"scope": Scope(tenant="t", user_id="u599", agent_id="b")})
    index.upsert([*records, shared], None)
    wanted = [r.id for r in records[::50]] + [records[7].id, UUID(int=12345)]  # 38 ids, one stored nowhere
    for scope in (Scope(tenant="t"), Scope.everything()):  # 600+ owners x 36 ids: one vectorised pass
        found = index.get(scope, wanted, None)
        expected = [*records[::50], records[7], shared]
        assert sorted((r.scope.as_tuple(), r.id.int) for r in found) == sorted(
            (r.scope.as_tuple(), r.id.int) for r in expected
        )
    assert index.get(Scope(tenant="t", user_id="u2"), [records[7].id], None) == [records[7]]
    assert index.get(Scope(tenant="other"), wanted, None) == []
