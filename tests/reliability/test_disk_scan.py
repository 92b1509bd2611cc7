"""The erasure scenario's scan of a store's files for what a purge must have erased.

It searches only around a file's non-zero bytes (preallocated files are mostly zeros); these
tests check that it still finds every needle wherever it lies.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memcore.scope import Scope
from memcore.testing.helpers import DIM, make_record
from memcore.testing.reliability import _on_disk

SIZE = 1 << 20


def _vector_starting_with_zeros() -> np.ndarray:
    vector = np.ones((1, DIM), dtype=np.float32)
    vector[0, :2] = 0.0  # its bytes begin with eight zero bytes
    return vector


@pytest.mark.parametrize("offset", [0, 100, SIZE // 2, SIZE - DIM * 4])
def test_a_vector_left_anywhere_in_a_zero_padded_file_is_found(tmp_path: Path, offset: int) -> None:
    victim = make_record(Scope(tenant="t"), "gone")
    vector = _vector_starting_with_zeros()
    data = bytearray(SIZE)
    raw = vector.astype("<f4").tobytes()
    data[offset : offset + len(raw)] = raw  # at 100: its leading zeros lie before the first non-zero byte
    (tmp_path / "page_0.dat").write_bytes(bytes(data))
    assert _on_disk(tmp_path, [victim], vector, [victim]) == 1


@pytest.mark.parametrize("offset", [0, SIZE // 3, SIZE - 40])
def test_content_and_ids_between_zeros_and_other_bytes_are_found(tmp_path: Path, offset: int) -> None:
    victim = make_record(Scope(tenant="t"), "secret-1234")
    data = bytearray(SIZE)
    data[7] = data[SIZE - 7] = 1  # something else written at both ends
    content = victim.message.content.encode()
    data[offset + 10 : offset + 10 + len(content)] = content
    (tmp_path / "wal").write_bytes(bytes(data))
    assert _on_disk(tmp_path, [victim], None, [victim]) == 1
    assert _on_disk(tmp_path, [make_record(Scope(tenant="t"), "never-written")], None, [victim]) == 0


def test_files_of_zeros_and_empty_files_hold_nothing(tmp_path: Path) -> None:
    victim = make_record(Scope(tenant="t"), "gone")
    (tmp_path / "zeros").write_bytes(bytes(SIZE))
    (tmp_path / "empty").write_bytes(b"")
    assert _on_disk(tmp_path, [victim], _vector_starting_with_zeros(), [victim]) == 0
