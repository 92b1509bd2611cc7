"""Benchmark data: vectors, queries, and the scope and metadata layout that sets selectivity.

Record ``i`` belongs to user ``u{i % 100}``, agent ``a{i % 10}`` and session
``s{i % 2}`` of one tenant, and carries ``metadata.bucket = i % 100``. So a
query scoped to one user sees 1 % of the records, to one agent 10 %, to one
session 50 %; the filter ``bucket < k`` selects ``k`` %.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.validation import Matrix, normalize_rows

TENANT = "bench"
SELECTIVITIES = (1, 10, 50)
"""The selectivities measured, in percent of the records."""


@dataclass(frozen=True)
class Dataset:
    """Unit vectors to store and unit query vectors, with where they came from."""

    name: str
    vectors: Matrix
    queries: Matrix

    @property
    def size(self) -> int:
        return len(self.vectors)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


def random_dataset(size: int, dim: int, queries: int, seed: int = 0) -> Dataset:
    """Gaussian vectors; queries are perturbed copies of stored vectors, so they have true neighbours."""
    rng = np.random.default_rng(seed)
    vectors = normalize_rows(rng.standard_normal((size, dim)).astype(np.float32))
    picks = rng.integers(0, size, queries)
    noisy = vectors[picks] + 0.5 * rng.standard_normal((queries, dim)).astype(np.float32) / np.sqrt(dim)
    return Dataset(f"random-{dim}d", vectors, normalize_rows(noisy.astype(np.float32)))


def npy_dataset(path: Path, size: int, queries: int, seed: int = 0) -> Dataset:
    """Embeddings from a ``.npy`` file (rows are vectors); queries are held-out rows, not stored."""
    loaded = np.load(path).astype(np.float32)
    if loaded.ndim != 2 or len(loaded) < size + queries:
        raise ValueError(f"{path} needs at least {size + queries} rows of vectors, has shape {loaded.shape}")
    order = np.random.default_rng(seed).permutation(len(loaded))
    rows = normalize_rows(loaded[order])
    return Dataset(path.stem, rows[:size], rows[size : size + queries])


def record_scope(index: int) -> Scope:
    """The scope of record ``index`` (see the module docstring)."""
    return Scope(
        tenant=TENANT, user_id=f"u{index % 100}", agent_id=f"a{index % 10}", session_id=f"s{index % 2}"
    )


def record(index: int) -> MemoryRecord:
    """Record ``index``: a short message in its scope, with its bucket."""
    return MemoryRecord(
        scope=record_scope(index),
        message=Message(role="user" if index % 2 else "assistant", content=record_text(index)),
        metadata={"bucket": index % 100},
    )


def text_bytes(size: int) -> int:
    """The UTF-8 bytes of the message texts of records ``0 .. size - 1``."""
    return sum(len(record_text(index).encode()) for index in range(size))


def record_text(index: int) -> str:
    """The message text of record ``index``."""
    return f"turn {index} on topic {index % 37}"


def selective_scope(percent: int, variant: int) -> Scope:
    """A query scope that sees ``percent`` % of the records (``variant`` picks which ones)."""
    if percent == 1:
        return Scope(tenant=TENANT, user_id=f"u{variant % 100}")
    if percent == 10:
        return Scope(tenant=TENANT, agent_id=f"a{variant % 10}")
    if percent == 50:
        return Scope(tenant=TENANT, session_id=f"s{variant % 2}")
    raise ValueError(f"no scope layout for {percent} %")


def scope_rows(percent: int, variant: int, size: int) -> npt.NDArray[np.intp]:
    """The rows :func:`selective_scope` sees."""
    rows = np.arange(size)
    modulus = {1: 100, 10: 10, 50: 2}[percent]
    selected: npt.NDArray[np.intp] = rows[rows % modulus == variant % modulus]
    return selected


def filter_rows(percent: int, size: int) -> npt.NDArray[np.intp]:
    """The rows the filter ``bucket < percent`` selects."""
    rows = np.arange(size)
    selected: npt.NDArray[np.intp] = rows[rows % 100 < percent]
    return selected
