"""memcore migrate between two backends: jsonl -> Qdrant Edge -> memory, nothing lost."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memcore import open_store
from memcore.cli import main
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.store import Store, VectorSpace
from memcore.testing.helpers import BASE_TIME, make_record, random_vectors
from memcore.transfer import entries, migrate

ALICE, BOB = Scope(tenant="acme", user_id="alice"), Scope(tenant="acme", user_id="bob", session_id="s")


def _snapshot(store: Store) -> dict[str, tuple[MemoryRecord, list[float] | None]]:
    return {
        str(record.id): (record, None if vector is None else np.round(vector, 5).tolist())
        for record, vector in entries(store, Scope.everything(), batch=7)
    }


def test_a_store_moves_from_jsonl_to_qdrant_and_back_with_nothing_lost(tmp_path: Path) -> None:
    jsonl, qdrant = f"jsonl://{tmp_path / 'jsonl'}", f"qdrant://{tmp_path / 'qdrant'}"
    with open_store(jsonl) as source:
        source.bind_vector_space(VectorSpace("hash", 16))
        shared = [
            make_record(ALICE, f"same time {i}").model_copy(update={"created_at": BASE_TIME})
            for i in range(9)
        ]
        rest = [make_record(BOB, f"bob {i}", minute=i, metadata={"i": i, "tags": ["x"]}) for i in range(30)]
        source.add(shared + rest, random_vectors(39, dim=16))
        source.add([make_record(ALICE, "no vector", kind="fact")])
        before = _snapshot(source)
    assert main(["migrate", jsonl, qdrant]) == 0
    with open_store(qdrant) as moved:
        assert moved.vector_space() == VectorSpace("hash", 16)
        assert _snapshot(moved) == before
        assert moved.count(BOB) == 30
        hit = moved.search(BOB, vector=random_vectors(39, dim=16)[20], limit=1)[0]
        assert hit.record.message.content == "bob 11"
        with open_store("memory://") as back:
            assert migrate(moved, back, Scope.everything()).records == 40
            assert _snapshot(back) == before
