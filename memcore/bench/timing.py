"""Latency samples and their summaries."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def sample(
    call: Callable[[int], Any],
    count: int,
    warmup: int = 3,
    before: Callable[[int], Any] | None = None,
) -> list[float]:
    """Milliseconds of ``call(i)`` for ``i`` in ``range(count)``, after ``warmup`` untimed calls;
    each call (warm-up ones too) after an untimed ``before(i)`` if given, to time ``call`` in the
    state ``before`` leaves (the CPU's caches after another scan, say)."""
    for i in range(min(warmup, count)):
        if before is not None:
            before(i)
        call(i)
    samples = []
    for i in range(count):
        if before is not None:
            before(i)
        started = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - started) * 1_000)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds, and queries per second at the mean latency."""
    values = np.asarray(samples)
    return {
        "p50_ms": round(float(np.percentile(values, 50)), 3),
        "p99_ms": round(float(np.percentile(values, 99)), 3),
        "qps": round(1_000 / float(values.mean()), 1),
    }
