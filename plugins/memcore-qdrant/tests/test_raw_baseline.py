"""The raw-client baseline of ``memcore bench`` does what the store does (so its overhead ratio is fair)."""

from __future__ import annotations

from memcore.testing.raw_baseline import check_raw_baseline


def test_raw_baseline_matches_the_store() -> None:
    check_raw_baseline("qdrant://{tmp}")
