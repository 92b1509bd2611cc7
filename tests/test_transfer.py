"""Export, import and migrate (memcore.transfer and its commands)."""

from __future__ import annotations

import base64
import io
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from memcore import open_store, transfer
from memcore.agent.blocks import embedding_text
from memcore.cli import main
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    IncompleteImportError,
    InvalidInputError,
    MemcoreError,
    ScopeError,
    StoreError,
    UnsupportedOperationError,
)
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.store import BaseStore, Store, VectorSpace
from memcore.stores.in_memory import InMemoryStore
from memcore.testing.helpers import BASE_TIME, make_record, random_vectors
from memcore.transfer import (
    add_entries,
    check_entries,
    entries,
    export,
    import_entries,
    migrate,
    read_export,
)

ALICE, BOB = Scope(tenant="acme", user_id="alice"), Scope(tenant="acme", user_id="bob")


def _fill(store: Store) -> list[MemoryRecord]:
    """Alice's and Bob's records, some without vectors, several sharing one timestamp."""
    store.bind_vector_space(VectorSpace("hash", 8))
    same_time = {"created_at": BASE_TIME}
    alice = [make_record(ALICE, f"alice {i}").model_copy(update=same_time) for i in range(7)]
    alice += [make_record(ALICE, f"alice later {i}", minute=i + 1, metadata={"i": i}) for i in range(5)]
    bob = [make_record(BOB, f"bob {i}", minute=i) for i in range(4)]
    store.add(alice[:10] + bob, random_vectors(14, dim=8))
    store.add(alice[10:])  # no vectors
    return alice + bob


def _snapshot(store: Store, scope: Scope) -> dict[str, tuple[MemoryRecord, list[float] | None]]:
    return {
        str(record.id): (record, None if vector is None else vector.round(6).tolist())
        for record, vector in entries(store, scope)
    }


@pytest.mark.parametrize("batch", [1, 3, 500])
def test_entries_page_through_shared_timestamps_without_skipping_or_repeating(batch: int) -> None:
    with open_store("memory://") as store:
        written = _fill(store)
        seen = [record.id for record, _ in entries(store, Scope.everything(), batch=batch)]
        assert sorted(seen) == sorted(r.id for r in written)
        assert len(seen) == len(set(seen))
        assert {r.id for r, _ in entries(store, ALICE, batch=batch)} == {r.id for r in written[:12]}


def test_export_then_import_round_trips_records_and_vectors_bit_for_bit(tmp_path: Path) -> None:
    with open_store("memory://") as source, open_store(f"jsonl://{tmp_path}") as destination:
        _fill(source)
        out = io.StringIO()
        assert export(source, Scope.everything(), out) == 16
        space, found = read_export(io.StringIO(out.getvalue()))
        outcome = import_entries(destination, space, found)
        assert (outcome.records, outcome.with_vectors, outcome.embedded_again) == (16, 14, False)
        assert destination.vector_space() == VectorSpace("hash", 8)
        mine, theirs = _snapshot(source, Scope.everything()), _snapshot(destination, Scope.everything())
        assert mine == theirs
        copied = [v for r, v in entries(destination, ALICE) if v is not None]
        original = [v for r, v in entries(source, ALICE) if v is not None]
        assert all(np.array_equal(a, b) for a, b in zip(copied, original, strict=True))


@pytest.mark.parametrize("with_vectors", ["both", "alice", "bob"])
def test_export_import_and_migrate_keep_records_of_one_id_in_two_scopes_apart(
    tmp_path: Path, with_vectors: str
) -> None:
    """A record is its scope plus its id: alice's and bob's records with one id stay two, each with
    its own vector or none, through export, import and migrate (and its read-back check). When
    only one of them has a vector, a read by id through the wide scope once gave it to both."""
    with open_store("memory://") as source, open_store(f"jsonl://{tmp_path}") as destination:
        source.bind_vector_space(VectorSpace("hash", 8))
        mine = make_record(ALICE, "alice's", minute=1)
        theirs = mine.model_copy(
            update={"scope": BOB, "message": mine.message.model_copy(update={"content": "bob's"})}
        )
        vectors = random_vectors(2, dim=8, seed=5)
        source.add([mine], vectors[:1] if with_vectors in ("both", "alice") else None)
        source.add([theirs], vectors[1:] if with_vectors in ("both", "bob") else None)

        def by_key(store: Store) -> dict[tuple[object, ...], tuple[str, list[float] | None]]:
            return {
                (*r.scope.as_tuple(), r.id): (r.message.content, None if v is None else v.round(6).tolist())
                for r, v in entries(store, Scope.everything())
            }

        out = io.StringIO()
        assert export(source, Scope.everything(), out) == 2
        space, found = read_export(io.StringIO(out.getvalue()))
        with open_store("memory://") as imported:
            assert import_entries(imported, space, found).records == 2
            assert by_key(imported) == by_key(source)
        assert migrate(source, destination, Scope.everything()).records == 2
        assert by_key(destination) == by_key(source)
        assert len(by_key(source)) == 2
        assert sum(v is not None for _, v in by_key(source).values()) == (2 if with_vectors == "both" else 1)
        assert destination.get(BOB.exact(), [mine.id]) == [theirs]


def test_export_and_import_filter_by_scope() -> None:
    with open_store("memory://") as source, open_store("memory://") as destination:
        _fill(source)
        out = io.StringIO()
        assert export(source, BOB, out) == 4
        header = json.loads(out.getvalue().splitlines()[0])
        assert header["scope"] == {"tenant": "acme", "user_id": "bob"}
        everything = io.StringIO()
        export(source, Scope.everything(), everything)
        space, found = read_export(io.StringIO(everything.getvalue()))
        with pytest.raises(ScopeError, match="outside the import's scope"):
            import_entries(destination, space, found, scope=ALICE)  # bob's lines are refused, not skipped
        assert destination.count(Scope.everything()) == 0
        alice = io.StringIO()
        export(source, ALICE, alice)
        space, found = read_export(io.StringIO(alice.getvalue()))
        assert import_entries(destination, space, found, scope=Scope(tenant="acme")).records == 12
        assert destination.count(BOB) == 0 and destination.count(ALICE) == 12


class _OtherEmbedder:
    name: ClassVar[str] = "other"
    dim = 5

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return HashEmbedder(dim=5).embed(texts)


def test_migrate_embeds_again_into_a_store_of_another_embedder() -> None:
    with open_store("memory://") as source, open_store("memory://") as destination:
        written = _fill(source)
        destination.bind_vector_space(VectorSpace("other", 5))
        with pytest.raises(EmbedderMismatchError, match="embed again"):
            migrate(source, destination, ALICE)
        assert destination.count(Scope.everything()) == 0
        outcome = migrate(source, destination, ALICE, embedder=_OtherEmbedder())
        assert (outcome.records, outcome.with_vectors, outcome.embedded_again) == (12, 10, True)
        record = written[9]
        vector = destination.vectors(ALICE, [record.id])[record.id]
        expected = _OtherEmbedder().embed([embedding_text(record.message)])[0]
        assert np.allclose(vector, expected / np.linalg.norm(expected), atol=1e-6)
        assert destination.vectors(ALICE, [written[11].id]) == {}  # stored without one: still without


def test_vectors_of_an_unknown_embedder_are_refused_by_a_bound_store() -> None:
    with open_store("memory://") as source, open_store("memory://") as destination:
        source.add([make_record(ALICE)], random_vectors(1, dim=5))  # never bound to an embedder
        destination.bind_vector_space(VectorSpace("other", 5))
        with pytest.raises(EmbedderMismatchError, match="does not say which embedder"):
            migrate(source, destination, ALICE)
        assert migrate(source, destination, ALICE, embedder=_OtherEmbedder()).embedded_again


def test_migrate_checks_every_record_in_the_destination(monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store("memory://") as source, open_store("memory://") as destination:
        _fill(source)
        monkeypatch.setattr(destination, "get", lambda scope, ids: [])
        with pytest.raises(StoreError, match="missing or differs"):
            migrate(source, destination, Scope.everything())


def test_a_malformed_export_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="not a memcore export"):
        read_export(io.StringIO('{"format": "something else"}\n'))
    with pytest.raises(InvalidInputError, match="not JSON"):
        read_export(io.StringIO("garbage\n"))
    record = make_record(ALICE).model_dump_json()
    lines = [
        '{"format": "memcore-export/1", "vector_space": null}',
        f'{{"record": {record}, "vector": "a!"}}',
    ]
    _, found = read_export(iter(lines))
    with pytest.raises(InvalidInputError, match="not base64"):
        list(found)


def test_the_commands_export_import_and_migrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source_url, copy_url, migrated_url = (f"jsonl://{tmp_path / name}" for name in ("a", "b", "c"))
    with open_store(source_url) as source:
        _fill(source)
    dump = tmp_path / "alice.jsonl"
    assert main(["export", source_url, "--tenant", "acme", "--user-id", "alice", "--out", str(dump)]) == 0
    assert len(dump.read_text().splitlines()) == 13
    assert dump.stat().st_mode & 0o777 == 0o600
    assert main(["export", "jsonl://", "--out", str(tmp_path / "failed.jsonl")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["alice.jsonl"]
    assert main(["import", copy_url, str(dump)]) == 0
    assert "imported 12 records (10 with vectors)" in capsys.readouterr().err
    assert main(["migrate", source_url, migrated_url, "--tenant", "acme"]) == 0
    assert "copied and checked 16 records" in capsys.readouterr().err
    with open_store(source_url) as source, open_store(copy_url) as copy, open_store(migrated_url) as migrated:
        assert _snapshot(copy, Scope.everything()) == _snapshot(source, ALICE)
        assert _snapshot(migrated, Scope.everything()) == _snapshot(source, Scope.everything())
    assert main(["import", copy_url, str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl" in capsys.readouterr().err


def test_timestamps_survive_the_move() -> None:
    with open_store("memory://") as source, open_store("memory://") as destination:
        written = _fill(source)
        migrate(source, destination, Scope.everything())
        assert [r.created_at for r in destination.list(BOB)] == [
            BASE_TIME + timedelta(minutes=i) for i in range(4)
        ]
        assert len(written) == destination.count(Scope.everything())


class _StoreWithoutVectorsHook(InMemoryStore):
    """A plugin written before ``Store.vectors`` existed."""

    _vectors = BaseStore._vectors


def test_a_store_without_the_vectors_hook_says_so() -> None:
    with _StoreWithoutVectorsHook() as store:
        store.add([make_record(ALICE)], random_vectors(1))
        assert store.count(ALICE) == 1
        with pytest.raises(UnsupportedOperationError, match="cannot read vectors back"):
            export(store, ALICE, io.StringIO())


ACME, GLOBEX = Scope(tenant="acme"), Scope(tenant="globex", user_id="carol")


def _line(record: MemoryRecord, vector: npt.NDArray[np.float32] | None = None) -> str:
    encoded = None if vector is None else base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return json.dumps({"record": json.loads(record.model_dump_json()), "vector": encoded})


def _export_file(
    path: Path, scope: dict[str, str] | None, records: list[MemoryRecord], dim: int | None = None
) -> Path:
    space = None if dim is None else {"embedder": "hash", "dimension": dim}
    header = json.dumps({"format": "memcore-export/1", "scope": scope, "vector_space": space})
    path.write_text("\n".join([header, *(_line(r) for r in records)]) + "\n")
    return path


def test_an_import_refuses_lines_outside_the_scope_its_header_declares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"jsonl://{tmp_path / 'store'}"
    theirs = make_record(GLOBEX, "globex's own")
    with open_store(url) as store:
        store.add([theirs])
    overwrite = theirs.model_copy(update={"message": theirs.message.model_copy(update={"content": "owned"})})
    crafted = _export_file(
        tmp_path / "crafted.jsonl",
        {"tenant": "acme"},
        [make_record(ACME, "acme's"), overwrite, make_record(GLOBEX, "new in globex")],
    )
    assert main(["import", url, str(crafted)]) == 1
    assert "outside the scope the export declares" in capsys.readouterr().err
    assert main(["import", url, str(crafted), "--tenant", "acme"]) == 1  # refused, not skipped
    assert "line 3 of the export" in capsys.readouterr().err
    with open_store(url) as store:
        assert store.list(Scope.everything()) == [theirs]  # nothing written, inside the scope or out
        with crafted.open() as lines:
            space, found = read_export(lines)
            with pytest.raises(ScopeError):
                import_entries(store, space, found)
        assert store.list(Scope.everything()) == [theirs]


def test_an_import_refuses_lines_outside_the_scope_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"jsonl://{tmp_path / 'store'}"
    undeclared = _export_file(
        tmp_path / "all.jsonl", None, [make_record(ACME, "acme's"), make_record(GLOBEX, "globex's")]
    )
    assert main(["import", url, str(undeclared), "--tenant", "acme"]) == 1
    assert "outside the import's scope tenant=acme" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO(undeclared.read_text()))
    assert main(["import", url, "-", "--tenant", "acme"]) == 1
    with open_store(url) as store:
        assert store.count(Scope.everything()) == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(undeclared.read_text()))
    assert main(["import", url, "-"]) == 0
    assert "imported 2 records" in capsys.readouterr().err
    with undeclared.open() as lines:
        assert check_entries(read_export(lines)[1], scope=Scope.everything()) == 2


def test_a_failed_import_says_how_many_records_it_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "BATCH", 2)
    good = [make_record(ALICE, f"r{i}") for i in range(5)]

    def source() -> Iterator[tuple[MemoryRecord, None]]:
        yield from ((record, None) for record in good)
        yield make_record(BOB, "outside"), None

    with open_store("memory://") as store:
        with pytest.raises(IncompleteImportError, match="the 4 records before it were stored") as caught:
            import_entries(store, None, source(), scope=ALICE)
        assert caught.value.stored == 4 == store.count(ALICE)
        assert isinstance(caught.value.cause, ScopeError)
        with pytest.raises(ScopeError):
            check_entries(source(), scope=ALICE)


def test_vectors_of_two_lengths_are_refused_typed(tmp_path: Path) -> None:
    first, second = make_record(ALICE, "a"), make_record(ALICE, "b")
    rows = [(first, np.ones(3, dtype=np.float32)), (second, np.ones(4, dtype=np.float32))]
    header = '{"format": "memcore-export/1", "vector_space": null}'
    with open_store("memory://") as store:
        with pytest.raises(DimensionMismatchError):
            add_entries(store, rows)
        with pytest.raises(DimensionMismatchError, match="record 2 of the import"):
            import_entries(store, None, iter(rows))
        spaced = '{"format": "memcore-export/1", "vector_space": {"embedder": "hash", "dimension": 3}}'
        with pytest.raises(DimensionMismatchError, match="line 3 of the export"):
            list(read_export([spaced, *(_line(r, v) for r, v in rows)])[1])
        with pytest.raises(DimensionMismatchError):
            check_entries(read_export([header, *(_line(r, v) for r, v in rows)])[1])
        assert store.count(ALICE) == 0


def test_an_import_of_a_time_at_the_end_of_the_calendar_is_a_typed_error() -> None:
    data = json.loads(make_record(ALICE).model_dump_json())
    data["created_at"] = "0001-01-01T00:00:00+01:00"
    lines = ['{"format": "memcore-export/1", "vector_space": null}', json.dumps({"record": data})]
    with pytest.raises(MemcoreError):
        list(read_export(lines)[1])


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_export_and_migrate_page_past_records_at_the_ends_of_time(batch: int) -> None:
    ends = [datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]
    written = [make_record(ALICE, f"r{i}").model_copy(update={"created_at": ends[i % 2]}) for i in range(4)]
    written.append(make_record(ALICE, "now"))
    with open_store("memory://") as source, open_store("memory://") as destination:
        source.add(written)
        assert sorted(r.id for r, _ in entries(source, ALICE, batch=batch)) == sorted(r.id for r in written)
        assert export(source, ALICE, io.StringIO()) == 5
        assert migrate(source, destination, ALICE).records == 5


def test_expiry_and_updates_move_with_their_records_and_older_exports_still_import() -> None:
    from memcore.testing import ManualClock

    with open_store("memory://") as source, open_store("memory://") as destination:
        clock = ManualClock()
        source.clock = destination.clock = clock
        lasting, fleeting, gone = (make_record(ALICE, text) for text in ("lasting", "fleeting", "gone"))
        source.add([lasting])
        source.add([fleeting], ttl=3600)
        source.add([gone], ttl=10)
        source.update(ALICE, lasting.id, content="lasting, edited")
        clock.advance(11)
        out = io.StringIO()
        assert export(source, Scope.everything(), out) == 2  # the expired record is not exported
        outcome = migrate(source, destination, Scope.everything())
        assert outcome.records == 2
        assert _snapshot(source, ALICE) == _snapshot(destination, ALICE)
        [edited] = destination.get(ALICE, [lasting.id])
        assert edited.updated_at == clock.now - timedelta(seconds=11) and edited.expires_at is None
        assert destination.get(ALICE, [fleeting.id])[0].expires_at == clock.now + timedelta(seconds=3589)
        clock.advance(3600)
        assert [r.id for r in destination.list(ALICE)] == [lasting.id]
    old_line = {"record": json.loads(make_record(ALICE, "from 2025").model_dump_json()), "vector": None}
    assert not {"expires_at", "updated_at"} & set(old_line["record"])  # as records were written before
    header = {"format": "memcore-export/1", "scope": None, "vector_space": None}
    space, found = read_export([json.dumps(header), json.dumps(old_line)])
    with open_store("memory://") as fresh:
        assert import_entries(fresh, space, found).records == 1
        assert fresh.list(ALICE)[0].expires_at is None
