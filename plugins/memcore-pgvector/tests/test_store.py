"""What the conformance suite does not cover: the server going away, dimensions, injection, erasure."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import pytest
from conftest import Postgres, running_postgres, with_table
from memcore_pgvector import PgvectorStore
from memcore_pgvector.filters import compile_filter
from memcore_pgvector.schema import NEVER_MICROS, SCHEMA_VERSION

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidInputError,
    InvalidRecordError,
    MemcoreError,
    RecordNotFoundError,
    ScopeError,
    StoreCorruptedError,
    StoreError,
    StoreUnavailableError,
)
from memcore.filters import MAX_FILTER_TERMS, parse_filter
from memcore.model_base import STORED
from memcore.records import MemoryRecord, Message
from memcore.scope import DEFAULT_TENANT, Scope
from memcore.store import VectorSpace, text_matches
from memcore.testing import ManualClock

SCOPE = Scope(tenant="acme", user_id="alice")


def _records(count: int, scope: Scope = SCOPE, text: str = "note") -> list[MemoryRecord]:
    return [
        MemoryRecord(scope=scope, message=Message(role="user", content=f"{text} {i}"), metadata={"i": i})
        for i in range(count)
    ]


def _vectors(count: int, dim: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_a_server_that_goes_away_is_unavailable_and_the_pool_recovers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_postgres(data) as server:
        store = PgvectorStore.from_url(with_table(server.uri, "records"))
        store.add(_records(3))
    try:
        with pytest.raises(StoreUnavailableError):
            store.count(SCOPE)
        with pytest.raises(StoreUnavailableError):
            store.add(_records(1))
        with running_postgres(data):  # the same data folder and socket: the server is back
            assert _once_back(lambda: store.count(SCOPE)) == 3
            store.add(_records(2, text="after"))
            assert store.count(SCOPE) == 5
    finally:
        store.close()


def _once_back(call: Callable[[], int], seconds: float = 60.0) -> int:
    """What ``call`` returns once the pool has reconnected (it retries with backoff, as callers should)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_server_that_is_not_there_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        PgvectorStore.from_url(f"postgresql://postgres@/postgres?host={tmp_path}&connect_timeout=2")


def test_a_table_made_with_another_dimension_refuses_others(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    with PgvectorStore.from_url(url) as store:
        store.add(_records(2), _vectors(2, 8))
    with PgvectorStore.from_url(url) as reopened:
        assert reopened.dimension == 8
        with pytest.raises(DimensionMismatchError):
            reopened.add(_records(1), _vectors(1, 4))
        assert reopened.count(SCOPE) == 2


def test_scoped_search_returns_limit_hits_through_the_hnsw_index(postgres: Postgres, table_name: str) -> None:
    """1 % of the table in scope: the iterative index scan keeps going until it has ``limit`` hits."""
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        count = 3_000
        scopes = [Scope(tenant="acme", user_id=f"u{i % 100}") for i in range(count)]
        records = [
            MemoryRecord(scope=scope, message=Message(role="user", content=f"r{i}"))
            for i, scope in enumerate(scopes)
        ]
        vectors = _vectors(count, 16)
        store.add(records, vectors)
        query = _vectors(1, 16, seed=1)[0]
        hits = store.search(Scope(tenant="acme", user_id="u7"), vector=query, limit=10)
        assert len(hits) == 10
        mine = [i for i, scope in enumerate(scopes) if scope.user_id == "u7"]
        exact = sorted(mine, key=lambda i: -float(vectors[i] @ query))[:10]
        found = {hit.record.message.content for hit in hits}
        assert len(found & {f"r{i}" for i in exact}) >= 9, "HNSW recall@10 within the scope"


def test_values_and_names_never_become_sql(postgres: Postgres, table_name: str) -> None:
    hostile = "x'); DROP TABLE " + table_name + "; --"
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        message = Message(role="user", content=hostile)
        store.add([MemoryRecord(scope=SCOPE, message=message, metadata={"k": hostile})])
        assert store.count(SCOPE, filter={"metadata.k": hostile}) == 1
        assert store.count(SCOPE, filter={"metadata.k": {"$in": [hostile, "' OR 1=1 --"]}}) == 1
        assert store.count(SCOPE, filter={"metadata.k": "' OR '1'='1"}) == 0
        assert len(store.search(SCOPE, text="drop table", limit=5)) == 1
    for bad in ("x; DROP TABLE y", "Records", '"quoted"', "a" * 49, "1st", "notes_meta"):
        with pytest.raises(InvalidInputError):
            PgvectorStore.from_url(with_table(postgres.uri, bad))


def test_purge_leaves_no_deleted_bytes_in_the_table_files(postgres: Postgres, table_name: str) -> None:
    needle = "needle-7f3a9c-the-secret-the-user-asked-us-to-forget"
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        kept = _records(50)
        secret = MemoryRecord(scope=SCOPE, message=Message(role="user", content=needle))
        store.add([*kept, secret], _vectors(51, 8))
        store.delete(SCOPE, [secret.id])
        store.purge()
        with psycopg.connect(postgres.uri, autocommit=True) as connection:
            connection.execute("CHECKPOINT")
        assert store.count(SCOPE) == 50
    table_files = subprocess.run(
        ["grep", "-rl", needle, str(postgres.data / "base")], capture_output=True, text=True, check=False
    )
    assert table_files.stdout == "", f"deleted content still on disk in {table_files.stdout}"


def test_messages_never_show_the_password() -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        PgvectorStore.from_url("postgresql://me:hunter2@127.0.0.1:1/db?connect_timeout=2")
    assert "hunter2" not in str(raised.value)


def test_concurrent_first_opens_of_a_table_all_succeed(postgres: Postgres, table_name: str) -> None:
    """Eight threads creating the same table at once wait on the advisory lock instead of racing."""
    url = with_table(postgres.uri, table_name)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def open_and_write(number: int) -> None:
        barrier.wait()
        try:
            with PgvectorStore.from_url(url) as store:
                store.add(_records(1, text=f"thread {number}"))
        except BaseException as exc:  # collected, and failed on below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with PgvectorStore.from_url(url) as store:
        assert store.count(SCOPE) == 8


def test_a_table_of_a_newer_schema_is_refused(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    PgvectorStore.from_url(url).close()
    with psycopg.connect(postgres.uri, autocommit=True) as connection:
        connection.execute(f"UPDATE {table_name}_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreCorruptedError, match="upgrade memcore-pgvector"):
        PgvectorStore.from_url(url)


def test_numbers_beyond_2_53_compare_exactly(postgres: Postgres, table_name: str) -> None:
    """Floats are stored as their shortest text: beyond 2**53 that is not their exact value."""
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        big = MemoryRecord(
            scope=SCOPE, message=Message(role="user", content="big"), metadata={"n": float(2**60)}
        )
        near = MemoryRecord(
            scope=SCOPE, message=Message(role="user", content="near"), metadata={"n": 2**60 + 4}
        )
        store.add([big, near])
        assert [r.id for r in store.list(SCOPE, filter={"metadata.n": 2**60})] == [big.id]
        assert [r.id for r in store.list(SCOPE, filter={"metadata.n": {"$gt": 2.0**60}})] == [near.id]
        assert store.count(SCOPE, filter={"metadata.n": {"$gte": 2**60}}) == 2
        assert store.count(Scope(tenant="other"), filter={"metadata.n": 2**60}) == 0


def test_nul_characters_are_kept_in_content_and_refused_in_metadata(
    postgres: Postgres, table_name: str
) -> None:
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        record = MemoryRecord(scope=SCOPE, message=Message(role="user", content="before\x00after"))
        store.add([record])
        assert store.get(SCOPE, [record.id])[0].message.content == "before\x00after"
        assert len(store.search(SCOPE, text="after", limit=5)) == 1
        assert store.search(SCOPE, text="reaf", limit=5) == []  # NUL is kept, not dropped
        bad = MemoryRecord(scope=SCOPE, message=Message(role="user", content="x"), metadata={"k": "a\x00b"})
        with pytest.raises(InvalidRecordError):
            store.add([bad])
        assert store.count(SCOPE) == 1


def test_a_store_opened_before_the_first_vector_finds_it(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    with PgvectorStore.from_url(url) as reader, PgvectorStore.from_url(url) as writer:
        assert reader.dimension is None
        vectors = _vectors(3, 8)
        writer.add(_records(3), vectors)
        assert reader.dimension == 8
        assert len(reader.search(SCOPE, vector=vectors[0], limit=3)) == 3


def test_a_second_binding_of_another_embedder_is_refused(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    with PgvectorStore.from_url(url) as first, PgvectorStore.from_url(url) as second:
        first.bind_vector_space(VectorSpace("minilm", 384))
        with pytest.raises(EmbedderMismatchError):
            second._save_vector_space(VectorSpace("other", 384))  # past the in-process check: the race
        assert second.vector_space() == VectorSpace("minilm", 384)


def test_a_password_parameter_is_masked_too() -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        PgvectorStore.from_url("postgresql://me@127.0.0.1:1/db?password=hunter2&connect_timeout=2")
    assert "hunter2" not in str(raised.value)


def test_a_forked_child_reconnects_and_both_sides_read_only_their_own_rows(
    postgres: Postgres, table_name: str
) -> None:
    """Issue 20, item 1: both processes loop ``list(own scope, limit=20)`` through one inherited store."""
    alice, bob = Scope(tenant="acme", user_id="alice"), Scope(tenant="globex", user_id="bob")
    store = PgvectorStore.from_url(with_table(postgres.uri, table_name))
    try:
        store.add(_records(20, alice, "alice") + _records(20, bob, "bob"))
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe and never returns
            status = 1
            try:
                figures = _list_loop(store, bob, "bob", seconds=2.0)
                store.close()
                os.write(write_end, json.dumps(figures).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        own = _list_loop(store, alice, "alice", seconds=2.0)
        with os.fdopen(read_end) as pipe:
            report = pipe.read()
        _, status = os.waitpid(child, 0)
        assert status == 0 and report, "the child crashed"
        seen = json.loads(report)
        for side in (own, seen):
            assert side["reads"] > 0 and side["foreign"] == side["untyped"] == side["refused"] == 0, side
        assert [r.message.content for r in store.list(alice, limit=1)] == ["alice 0"]
        assert store.count(bob) == 20  # the parent's sessions survived the child's close
    finally:
        store.close()


def _list_loop(store: PgvectorStore, scope: Scope, name: str, seconds: float) -> dict[str, int]:
    figures = {"reads": 0, "foreign": 0, "untyped": 0, "refused": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            rows = store.list(scope, limit=20)
        except MemcoreError:
            figures["refused"] += 1
            break
        except Exception:
            figures["untyped"] += 1
            continue
        figures["reads"] += 1
        figures["foreign"] += sum(not r.message.content.startswith(f"{name} ") for r in rows)
        figures["foreign"] += int(len(rows) != 20)
    return figures


def test_an_in_list_is_one_parameter_whatever_its_length() -> None:
    """A filter within MAX_FILTER_TERMS never comes near PostgreSQL's 65,535 parameters."""
    values = list(range(MAX_FILTER_TERMS))
    for spec in ({"metadata.k": {"$in": values}}, {"metadata.k": {"$nin": values}}):
        _, parameters = compile_filter(parse_filter(spec))
        assert len(parameters) <= 5


def test_statements_that_cannot_succeed_on_retry_are_not_unavailable(
    postgres: Postgres, table_name: str
) -> None:
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        too_many = "SELECT 1 WHERE 1 = ANY(ARRAY[" + ", ".join(["%s"] * 70_000) + "]::int[])"
        with pytest.raises(StoreError) as raised, store._connections.connection("test") as connection:
            connection.execute(too_many, list(range(70_000)))
        assert not isinstance(raised.value, StoreUnavailableError)
        with pytest.raises(StoreError) as raised, store._connections.connection("test") as connection:
            connection.execute("SELECT array_fill(1, ARRAY[200000000])")  # 54000: over a limit
        assert not isinstance(raised.value, StoreUnavailableError)
        assert store.count(SCOPE) == 0  # and the pool is fine


@pytest.mark.parametrize("others", [30, 0], ids=["others-kept", "table-emptied"])
def test_purge_leaves_no_deleted_value_in_the_planner_statistics(
    postgres: Postgres, table_name: str, others: int
) -> None:
    """Issue 20, item 10: ANALYZE, delete a user's records, purge, CHECKPOINT: nothing of them left
    in pg_stats nor in any file of the data folder outside the write-ahead log (an emptied table:
    ANALYZE, finding no row, would keep the old statistics)."""
    user = "victim-7d1e@example.com"
    gone = Scope(tenant="acme", user_id=user)
    needles = [user, "secret-content-4b8f", "secret-metadata-91c2", f'"user_id":"{user}"']
    url = with_table(postgres.uri, table_name)
    kept = [
        MemoryRecord(
            scope=Scope(tenant="acme", user_id=f"kept{i}"), message=Message(role="user", content="k")
        )
        for i in range(others)
    ]
    victims = [
        MemoryRecord(
            scope=gone,
            message=Message(role="user", content=f"secret-content-4b8f {i}"),
            metadata={"tag": "secret-metadata-91c2"},
        )
        for i in range(200)  # the most common user id: in the statistics' most common values
    ]
    with PgvectorStore.from_url(url) as store, psycopg.connect(postgres.uri, autocommit=True) as admin:
        store.add(kept + victims, _vectors(others + 200, 8))
        admin.execute(f"ALTER TABLE {table_name} ALTER COLUMN record SET STATISTICS 100")  # as version 1
        admin.execute(f"ALTER TABLE {table_name} ALTER COLUMN metadata SET STATISTICS 100")
        admin.execute(f"ALTER TABLE {table_name} ALTER COLUMN content_folded SET STATISTICS 100")
        admin.execute(f"ANALYZE {table_name}")
        stats = admin.execute("SELECT pg_stats::text FROM pg_stats WHERE tablename = %s", [table_name])
        assert any(user in row[0] for row in stats.fetchall()), "the scenario puts the user in pg_stats"
        assert store.delete_where(gone, {}) == 200
        store.purge()
        admin.execute("CHECKPOINT")
        stats = admin.execute("SELECT pg_stats::text FROM pg_stats WHERE tablename = %s", [table_name])
        left = [row[0] for row in stats.fetchall()]
        assert bool(left) == bool(others) and not [n for n in needles if any(n in row for row in left)]
        assert store.count(Scope(tenant="acme")) == others
    for needle in needles:
        found = subprocess.run(
            ["grep", "-rlF", needle, str(postgres.data / "base"), str(postgres.data / "global")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert found.stdout == "", f"{needle!r} still on disk in {found.stdout}"


def test_purge_waits_for_a_transaction_that_could_still_see_the_deleted_rows(
    postgres: Postgres, table_name: str
) -> None:
    """A transaction older than the delete still sees the deleted rows, and ``VACUUM FULL`` copies
    what some transaction can see into the rewritten files: purge waits for it to end first (here
    it ends a second later), so nothing of the deleted records stays on disk."""
    user = "seen-by-an-old-snapshot-5c2d@example.com"
    gone = Scope(tenant="acme", user_id=user)
    records = [MemoryRecord(scope=gone, message=Message(role="user", content=f"m{i}")) for i in range(20)]
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        store.add(records, _vectors(20, 8))
        with psycopg.connect(postgres.uri) as reader, psycopg.connect(postgres.uri, autocommit=True) as admin:
            reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            reader.execute("SELECT 1")  # the transaction's snapshot: taken before the delete
            assert store.delete_where(gone, {}) == 20
            threading.Timer(1.0, reader.rollback).start()
            started = time.monotonic()
            store.purge()
            waited = time.monotonic() - started
            admin.execute("CHECKPOINT")
    found = subprocess.run(
        ["grep", "-rlF", user, str(postgres.data / "base")], capture_output=True, text=True, check=False
    )
    assert found.stdout == "", f"{user!r} still on disk in {found.stdout}"
    assert waited >= 0.9


def test_columns_of_user_content_are_never_sampled_by_analyze(postgres: Postgres, table_name: str) -> None:
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        store.add(_records(50, text="sampled-never-3e9a"), _vectors(50, 8))  # types the embedding
        with psycopg.connect(postgres.uri, autocommit=True) as admin:
            admin.execute(f"ANALYZE {table_name}")
            rows = admin.execute(
                "SELECT attname, pg_stats::text FROM pg_stats WHERE tablename = %s", [table_name]
            ).fetchall()
    assert {name for name, _ in rows}.isdisjoint({"content_folded", "metadata", "record", "embedding"})
    assert not [text for _, text in rows if "sampled-never-3e9a" in text]


def test_text_search_agrees_with_the_reference_on_nul(postgres: Postgres, table_name: str) -> None:
    contents = ["abc\x00def", "abcdef", "ab\x00", "x\uffffy", "\x00", "CD"]
    texts = ["cd", "c\x00d", "\x00", "b\x00", "\uffff", "x\uffff", "\x00d", "abc", "\x00\x00"]
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        records = [MemoryRecord(scope=SCOPE, message=Message(role="user", content=c)) for c in contents]
        store.add(records, _vectors(len(records), 8))
        for text in texts:
            expected = {r.id for r in records if text_matches(text, r.message.content)}
            assert {h.record.id for h in store.search(SCOPE, text=text, limit=10)} == expected, text
            with_vector = store.search(SCOPE, text=text, vector=_vectors(1, 8, seed=2)[0], limit=10)
            assert {h.record.id for h in with_vector} == expected, text


def _back_to_version_3(admin: psycopg.Connection[tuple[object, ...]], table_name: str) -> None:
    """Make a table of this version what version 3 wrote: no ``expires_at`` column."""
    admin.execute(f"ALTER TABLE {table_name} DROP COLUMN expires_at")  # its index goes with it
    admin.execute(f"UPDATE {table_name}_meta SET value = '3' WHERE key = 'schema_version'")


def _back_to_version_2(admin: psycopg.Connection[tuple[object, ...]], table_name: str) -> None:
    """Make a table of this version what version 2 wrote: keyed by ``id``, no ``key`` column."""
    _back_to_version_3(admin, table_name)
    admin.execute(f"ALTER TABLE {table_name} DROP COLUMN key")  # its primary key goes with it
    admin.execute(f"DROP INDEX {table_name}_record_id")
    admin.execute(f"ALTER TABLE {table_name} ADD PRIMARY KEY (id)")
    admin.execute(f"UPDATE {table_name}_meta SET value = '2' WHERE key = 'schema_version'")


def test_a_version_2_table_gets_keys_and_its_records_stay_readable_and_erasable(
    postgres: Postgres, table_name: str
) -> None:
    """Issue 20, item 15: version 2 keyed rows by id alone; version 3 keys them by scope and id."""
    url = with_table(postgres.uri, table_name)
    other = Scope(tenant="t1", user_id="bob")
    mine, theirs = _records(3), _records(2, scope=other)
    with PgvectorStore.from_url(url) as store:
        store.add(mine + theirs, _vectors(5, 8))
    with psycopg.connect(postgres.uri, autocommit=True) as admin:
        _back_to_version_2(admin, table_name)
    with PgvectorStore.from_url(url) as store:
        assert store.get(SCOPE, [r.id for r in mine + theirs]) == mine
        assert set(store.vectors(other, [r.id for r in theirs])) == {r.id for r in theirs}
        assert {h.record.id for h in store.search(SCOPE, vector=_vectors(1, 8, seed=3)[0], limit=9)} == {
            r.id for r in mine
        }
        same_id = mine[0].model_copy(update={"scope": other})
        store.add([same_id])
        assert store.get(SCOPE, [mine[0].id]) == [mine[0]]
        assert store.get(other, [mine[0].id]) == [same_id]
        assert store.delete(SCOPE, [mine[0].id]) == 1
        assert store.get(other, [mine[0].id]) == [same_id]
    with psycopg.connect(postgres.uri, autocommit=True) as admin:
        version = admin.execute(f"SELECT value FROM {table_name}_meta WHERE key = 'schema_version'")
        assert version.fetchone() == (SCHEMA_VERSION,)
        primary = admin.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
            [table_name],
        )
        assert primary.fetchall() == [("key",)]
        stale = admin.execute(f"SELECT count(*) FROM {table_name} WHERE id = %s", [mine[0].id])
        assert stale.fetchone() == (1,)  # only the other scope's record of that id is left


def test_a_version_1_table_is_migrated_nul_content_included(postgres: Postgres, table_name: str) -> None:
    url = with_table(postgres.uri, table_name)
    record = MemoryRecord(scope=SCOPE, message=Message(role="user", content="abc\x00def"))
    with PgvectorStore.from_url(url) as store:
        store.add([record])
    with psycopg.connect(postgres.uri, autocommit=True) as admin:  # back to what version 1 wrote
        _back_to_version_2(admin, table_name)
        admin.execute(f"UPDATE {table_name} SET content_folded = 'abcdef'")
        admin.execute(f"UPDATE {table_name}_meta SET value = '1' WHERE key = 'schema_version'")
        admin.execute(f"ALTER TABLE {table_name} ALTER COLUMN record SET STATISTICS -1")
    with PgvectorStore.from_url(url) as store:
        assert store.search(SCOPE, text="cd", limit=5) == []
        assert len(store.search(SCOPE, text="c\x00d", limit=5)) == 1
    with psycopg.connect(postgres.uri, autocommit=True) as admin:
        version = admin.execute(f"SELECT value FROM {table_name}_meta WHERE key = 'schema_version'")
        assert version.fetchone() == (SCHEMA_VERSION,)
        target = admin.execute(
            "SELECT attstattarget FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'record'",
            [table_name],
        )
        assert target.fetchone() == (0,)


def test_every_record_has_a_tenant_and_a_tenantless_one_is_refused_typed(
    postgres: Postgres, table_name: str
) -> None:
    """Issue 20, item 14: the tenant column is NOT NULL; a scope without one reads DEFAULT_TENANT."""
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        mine = MemoryRecord(scope=Scope(user_id="alice"), message=Message(role="user", content="mine"))
        store.add([mine])
        assert store.get(Scope(tenant=DEFAULT_TENANT, user_id="alice"), [mine.id]) == [mine]
        assert store.count(Scope(tenant="other", user_id="alice")) == 0
        data = mine.model_dump(mode="json")
        data["id"], data["scope"]["tenant"] = str(uuid.uuid4()), None
        old = MemoryRecord.model_validate(data, context=STORED)  # as decoded from old stored data
        with pytest.raises(ScopeError):
            store.add([old])
        assert store.count(Scope.everything()) == 1


def test_a_version_3_table_gets_expires_at_and_its_records_never_expire(
    postgres: Postgres, table_name: str
) -> None:
    """Issue 23: rows written before expiry existed get the column's default, never expiring;
    the table then takes expiring records, updates and sweeps like a new one."""
    url = with_table(postgres.uri, table_name)
    old = _records(3)
    with PgvectorStore.from_url(url) as store:
        store.add(old, _vectors(3, 8))
    with psycopg.connect(postgres.uri, autocommit=True) as admin:
        _back_to_version_3(admin, table_name)
    clock = ManualClock()
    with PgvectorStore.from_url(url) as store:
        store.clock = clock
        assert store.get(SCOPE, [r.id for r in old]) == old
        short = _records(1, text="short")
        store.add(short, ttl=60)
        assert store.update(SCOPE, old[0].id, content="changed").message.content == "changed"
        clock.advance(10**9)  # about 32 years
        assert {r.id for r in store.list(SCOPE)} == {r.id for r in old}
        assert [(e.scope, e.count) for e in store.scopes(SCOPE)] == [(SCOPE.exact(), 3)]
        assert store.sweep() == 1
    with psycopg.connect(postgres.uri, autocommit=True) as admin:
        version = admin.execute(f"SELECT value FROM {table_name}_meta WHERE key = 'schema_version'")
        assert version.fetchone() == (SCHEMA_VERSION,)
        expiries = admin.execute(f"SELECT DISTINCT expires_at FROM {table_name}")
        assert expiries.fetchall() == [(NEVER_MICROS,)]
        index = admin.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", [f"{table_name}_expiry"]
        )
        assert "WHERE (expires_at < '9007199254740991'::bigint)" in str(index.fetchone())


def _plan(admin: psycopg.Connection[tuple[object, ...]], statement: str, values: list[object]) -> str:
    return "\n".join(str(row[0]) for row in admin.execute("EXPLAIN " + statement, values).fetchall())


def test_live_reads_keep_the_scope_index_and_sweeps_use_the_expiry_index(
    postgres: Postgres, table_name: str
) -> None:
    """The live condition is a filter on the rows the scope index finds (the ordered read's plan
    is the one it had without it); the partial index of expiring rows serves sweep()."""
    with PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store:
        scopes = [Scope(tenant="acme", user_id=f"u{i % 100}", agent_id="a") for i in range(2_000)]
        records = [MemoryRecord(scope=s, message=Message(role="user", content="r")) for s in scopes]
        store.add(records[:1_980])
        store.add(records[1_980:], ttl=60)
        with psycopg.connect(postgres.uri, autocommit=True) as admin:
            admin.execute(f"ANALYZE {table_name}")
            for scope in (
                Scope(tenant="acme", user_id="u7"),
                Scope(tenant="acme", user_id="u7", agent_id="a").exact(),
            ):
                where, values = store._visible(scope)
                plan = _plan(
                    admin,
                    f"SELECT record FROM {table_name} WHERE {where}"
                    " ORDER BY created_at DESC, id DESC, key DESC LIMIT 20",
                    values,
                )
                assert f"Index Scan using {table_name}_scope" in plan, plan
                assert "Filter: (expires_at > " in plan, plan
            plan = _plan(admin, f"DELETE FROM {table_name} WHERE expires_at <= %s", [NEVER_MICROS - 1])
            assert f"{table_name}_expiry" in plan, plan


def test_an_update_waiting_on_a_deleting_transaction_never_brings_the_record_back(
    postgres: Postgres, table_name: str
) -> None:
    """The update is one conditional UPDATE: blocked on the row a delete holds, it finds the row
    gone once the delete commits (a read-then-upsert would insert it again)."""
    with (
        PgvectorStore.from_url(with_table(postgres.uri, table_name)) as store,
        psycopg.connect(postgres.uri) as deleting,
        psycopg.connect(postgres.uri, autocommit=True) as observer,
    ):
        [record] = _records(1)
        store.add([record], _vectors(1, 8))
        deleting.execute(f"DELETE FROM {table_name} WHERE id = %s", [record.id])  # not committed yet
        outcome: list[object] = []

        def update() -> None:
            try:
                outcome.append(store.update(SCOPE, record.id, content="again"))
            except RecordNotFoundError as error:
                outcome.append(error)

        updater = threading.Thread(target=update)
        updater.start()
        deadline = time.monotonic() + 10
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        while observer.execute(waiting).fetchone() != (1,):
            assert time.monotonic() < deadline, "the update never waited for the deleted row"
            time.sleep(0.01)
        deleting.commit()
        updater.join()
        assert len(outcome) == 1 and isinstance(outcome[0], RecordNotFoundError), outcome
        assert store.get(SCOPE, [record.id]) == []
        assert store.count(Scope.everything()) == 0
