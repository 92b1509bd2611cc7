"""The raw psycopg baseline of ``memcore bench`` does what the store does (so its overhead ratio is fair)."""

from __future__ import annotations

from conftest import with_table

from memcore.testing.raw_baseline import check_raw_baseline


def test_raw_baseline_matches_the_store(postgres_uri: str) -> None:
    check_raw_baseline(with_table(postgres_uri, "{name}"))


def test_no_raw_client_for_other_schemes() -> None:
    from memcore_pgvector.plugin import memcore_bench_raw_client

    assert memcore_bench_raw_client("qdrant:///tmp/x?table=t") is None
