"""The raw-client baseline of ``memcore bench`` does what the store does (so its overhead ratio is fair)."""

from __future__ import annotations

from memcore.testing.raw_baseline import check_raw_baseline


def test_raw_baseline_matches_the_store() -> None:
    check_raw_baseline("qdrant://{tmp}")


def test_no_raw_client_for_a_url_of_another_scheme() -> None:
    """Another scheme's URL with a query string is not a Qdrant path (it once was taken for one)."""
    from memcore_qdrant.plugin import memcore_bench_raw_client

    assert memcore_bench_raw_client("postgresql://me@/db?host=/tmp/socket") is None
