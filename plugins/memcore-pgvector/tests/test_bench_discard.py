"""``memcore bench`` leaves no table behind on the user's PostgreSQL (``?collection={name}``)."""

from __future__ import annotations

import psycopg
import pytest
from conftest import with_table

from memcore.bench.workloads import opened
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

BENCH_TABLES = "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'memcore\\_bench\\_%'"


def _bench_tables(uri: str) -> int:
    with psycopg.connect(uri) as connection:
        row = connection.execute(BENCH_TABLES).fetchone()
    assert row is not None
    return int(row[0])


def test_a_fresh_table_is_dropped_after_the_run(postgres_uri: str) -> None:
    before = _bench_tables(postgres_uri)
    with opened(with_table(postgres_uri, "{name}")) as store:
        store.add(
            [MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="hi"))], [[1.0, 0.0]]
        )
        assert _bench_tables(postgres_uri) == before + 2  # the records and their meta table
    assert _bench_tables(postgres_uri) == before


def test_a_table_not_named_by_the_run_is_left_alone(postgres_uri: str, table_name: str) -> None:
    url = with_table(postgres_uri, table_name) + "&application_name={name}"
    with pytest.warns(UserWarning, match="nothing was dropped"), opened(url) as store:
        store.add([MemoryRecord(scope=Scope(tenant="t"), message=Message(role="user", content="mine"))])
    with psycopg.connect(postgres_uri) as connection:
        row = connection.execute("SELECT to_regclass(%s)", [table_name]).fetchone()
    assert row is not None and row[0] is not None


def test_no_discard_for_other_schemes() -> None:
    from memcore_pgvector.plugin import memcore_bench_discard

    assert memcore_bench_discard("qdrant:///tmp/x?table=t", "t") is None
