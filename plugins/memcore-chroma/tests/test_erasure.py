"""Chroma's HNSW files must not keep bytes that no element owns (stale heap, deleted records' among them)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from memcore_chroma import ChromaStore, erasure
from memcore_chroma.erasure import scrub_vector_indexes

from memcore.errors import StoreError
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors

SCOPE = Scope(tenant="t")


def _spare_bytes(root: Path) -> list[int]:
    """Per index under ``root``: how many non-zero bytes lie past its last element."""
    spare = []
    for header in sorted(root.glob("*/header.bin")):
        _, _, _, elements, element_size = struct.unpack_from("<i4Q", header.read_bytes())
        level0 = (header.parent / "data_level0.bin").read_bytes()[elements * element_size :]
        lengths = (header.parent / "length.bin").read_bytes()[elements * 4 :]
        spare.append(sum(byte != 0 for byte in level0 + lengths))
    return spare


def test_a_small_index_keeps_no_stale_bytes_once_closed_or_purged(tmp_path: Path) -> None:
    # Under Chroma's sync threshold (1,000) its HNSW has no element, and Chroma writes the
    # whole unset initial capacity on each client's first read.
    records = [make_record(SCOPE, f"secret {i}") for i in range(200)]
    vectors = random_vectors(200, seed=3)
    with ChromaStore(tmp_path) as store:
        store.add(records, vectors)
        store.delete(SCOPE, [r.id for r in records[:40]])
        store.purge()
        assert _spare_bytes(tmp_path) == [0]
        assert store.count(SCOPE) == 160
    assert _spare_bytes(tmp_path) == [0]
    with ChromaStore(tmp_path) as reopened:
        assert reopened.search(SCOPE, vector=vectors[50], limit=1)[0].record.id == records[50].id
    assert _spare_bytes(tmp_path) == [0]


def _index(folder: Path, *, version: int, elements: int, capacity: int, element_size: int) -> None:
    folder.mkdir()
    header = struct.pack("<i6Q", version, 0, capacity, elements, element_size, 0, 0)
    (folder / "header.bin").write_bytes(header + bytes(100 - len(header)))
    (folder / "data_level0.bin").write_bytes(b"\x01" * elements * element_size + b"stale" * capacity)
    (folder / "length.bin").write_bytes(b"\x02" * 4 * capacity)


def test_scrub_zeroes_only_what_lies_past_the_last_element(tmp_path: Path) -> None:
    _index(tmp_path / "segment", version=1, elements=3, capacity=10, element_size=8)
    scrub_vector_indexes(tmp_path)
    level0 = (tmp_path / "segment" / "data_level0.bin").read_bytes()
    lengths = (tmp_path / "segment" / "length.bin").read_bytes()
    assert level0 == b"\x01" * 24 + bytes(50)
    assert lengths == b"\x02" * 12 + bytes(28)


def test_scrub_refuses_a_header_layout_it_does_not_know(tmp_path: Path) -> None:
    _index(tmp_path / "segment", version=2, elements=3, capacity=10, element_size=8)
    with pytest.raises(StoreError, match="not the layout memcore knows"):
        scrub_vector_indexes(tmp_path)
    assert (tmp_path / "segment" / "data_level0.bin").read_bytes().endswith(b"stale")


def test_closing_drops_index_files_of_a_layout_the_scrub_does_not_know(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, vectors = [make_record(SCOPE, f"r {i}") for i in range(20)], random_vectors(20, seed=4)
    store = ChromaStore(tmp_path)
    store.add(records, vectors)
    assert store.search(SCOPE, vector=vectors[0], limit=1)[0].record.id == records[0].id
    assert list(tmp_path.glob("*/header.bin")), "Chroma must have written its index files"
    monkeypatch.setattr(erasure, "_HEADER_VERSION", 99)  # as if a newer chromadb wrote them
    store.close()
    assert list(tmp_path.glob("*/header.bin")) == []
    monkeypatch.undo()
    with ChromaStore(tmp_path) as reopened:
        assert reopened.search(SCOPE, vector=vectors[3], limit=1)[0].record.id == records[3].id
