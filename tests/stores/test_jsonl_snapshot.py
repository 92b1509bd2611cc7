"""The jsonl store's snapshots: used when valid, ignored when not, and safe at every crash point."""

from __future__ import annotations

import errno
import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from memcore.errors import StoreCorruptedError
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.stores import jsonl, jsonl_log, jsonl_snapshot
from memcore.stores.jsonl import JsonlStore
from memcore.stores.jsonl_snapshot import SNAPSHOT_NAME, read_snapshot, write_snapshot
from memcore.stores.partition import Rows
from memcore.testing.helpers import DIM, make_record, random_vectors

SCOPE, OTHER = Scope(tenant="t", user_id="u"), Scope(tenant="t", user_id="other")
CRASHED = 77


@pytest.fixture(autouse=True)
def snapshot_every_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot for any scope with a line past its snapshot: small stores exercise them."""
    monkeypatch.setattr(jsonl, "SNAPSHOT_MIN_LINES", 1)


@pytest.fixture
def replay_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Where each open started reading each log, by scope folder name."""
    starts: dict[str, int] = {}
    real = jsonl_log.read_log

    def spy(path: Path, start: int = 0) -> jsonl_log.LogReadResult:
        starts[path.parent.name] = start
        return real(path, start)

    monkeypatch.setattr(jsonl_log, "read_log", spy)
    yield starts


def _snapshot(root: Path, scope: Scope = SCOPE) -> Path:
    return root / "scopes" / scope.digest() / SNAPSHOT_NAME


def _log(root: Path, scope: Scope = SCOPE) -> Path:
    return root / "scopes" / scope.digest() / "entries.jsonl"


def _state(root: Path) -> dict[tuple[str | None, str], tuple[str, list[float]]]:
    """Every record of the store: (user, id) -> (content, vector)."""
    with JsonlStore(root) as store:
        records = store.list(Scope(tenant="t"), limit=10_000)
        state = {}
        for scope in {r.scope for r in records}:
            ids = [r.id for r in records if r.scope == scope]
            vectors = store.vectors(scope, ids)
            for record in records:
                if record.scope == scope:
                    state[(scope.user_id, str(record.id))] = (
                        record.message.content,
                        vectors[record.id].tolist() if record.id in vectors else [],
                    )
        return state


def _in_child(action: Callable[[], None]) -> int:
    """Run ``action`` in a forked process that then dies without closing anything (a crash);
    its exit code (:data:`CRASHED` if a fault hook killed it)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            action()
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _made(root: Path, records: list[MemoryRecord], seed: int = 0) -> None:
    with JsonlStore(root) as store:
        store.add(records, random_vectors(len(records), seed=seed))


def test_a_closed_store_reopens_from_its_snapshot_alone(
    tmp_path: Path, replay_starts: dict[str, int]
) -> None:
    root = tmp_path / "store"
    _made(root, [make_record(SCOPE, f"r{i}", metadata={"i": i}) for i in range(20)])
    before = _state(root)
    assert _snapshot(root).stat().st_mode & 0o777 == 0o600
    replay_starts.clear()
    assert _state(root) == before
    assert replay_starts[SCOPE.digest()] == _log(root).stat().st_size
    with JsonlStore(root) as store:
        query = random_vectors(1, seed=9)[0]
        hits = store.search(SCOPE, vector=query, limit=3)
        expected = np.array([before[("u", str(h.record.id))][1] for h in hits]) @ (
            query / np.linalg.norm(query)
        )
        assert [h.score for h in hits] == pytest.approx(expected.tolist(), abs=1e-5)


def test_writes_after_the_snapshot_survive_a_crash_and_are_replayed_from_it(
    tmp_path: Path, replay_starts: dict[str, int]
) -> None:
    root = tmp_path / "store"
    records = [make_record(SCOPE, f"r{i}") for i in range(10)]
    _made(root, records)
    covered = _log(root).stat().st_size
    replaced = records[1].model_copy(
        update={"message": records[1].message.model_copy(update={"content": "new"})}
    )

    def write_then_crash() -> None:
        store = JsonlStore(root)
        store.delete(SCOPE, [records[0].id])
        store.add([replaced, make_record(SCOPE, "added")])

    assert _in_child(write_then_crash) == 0
    replay_starts.clear()
    with JsonlStore(root) as store:
        assert replay_starts[SCOPE.digest()] == covered
        contents = sorted(r.message.content for r in store.list(SCOPE))
        assert contents == sorted(["new", "added", *(f"r{i}" for i in range(2, 10))])
        assert store.get(SCOPE, [records[0].id]) == []


def test_a_torn_write_past_the_snapshot_loses_only_that_write_at_every_offset(
    tmp_path: Path, replay_starts: dict[str, int]
) -> None:
    root = tmp_path / "store"
    _made(root, [make_record(SCOPE, "kept")])
    covered = _log(root).stat().st_size
    assert _in_child(lambda: JsonlStore(root).add([make_record(SCOPE, "torn")])) == 0
    intact = _log(root).read_bytes()
    snapshot = _snapshot(root).read_bytes()
    for offset in range(covered, len(intact)):
        _log(root).write_bytes(intact[:offset])
        _snapshot(root).write_bytes(snapshot)
        with JsonlStore(root) as store:
            assert replay_starts[SCOPE.digest()] == covered, offset
            assert [r.message.content for r in store.list(SCOPE)] == ["kept"], offset
            assert store.skipped_lines() == (offset > covered), offset


def test_a_torn_line_under_a_snapshot_is_counted_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _made(root, [make_record(SCOPE, "first")])
    with _log(root).open("ab") as handle:
        handle.write(b'{"op":"put","seq":')  # a torn write, then a close snapshots the log
    for expected in (["first"], ["first", "second"], ["first", "second"]):
        with JsonlStore(root) as store:
            assert store.skipped_lines() == 1
            assert [r.message.content for r in store.list(SCOPE)] == expected
            if len(expected) == 1:
                store.add([make_record(SCOPE, "second")])


def test_a_store_written_before_snapshots_opens_unchanged_and_gains_one_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    monkeypatch.setattr(jsonl, "SNAPSHOT_MIN_LINES", 10**9)
    _made(root, [make_record(SCOPE, f"r{i}") for i in range(5)])
    assert not _snapshot(root).exists()
    before = _state(root)
    monkeypatch.setattr(jsonl, "SNAPSHOT_MIN_LINES", 1)
    assert _state(root) == before
    assert _snapshot(root).exists()
    assert _state(root) == before


def test_close_rewrites_a_snapshot_once_enough_was_written_past_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    covered = 2 * jsonl.SNAPSHOT_REWRITE_RATIO
    _made(root, [make_record(SCOPE, f"r{i}") for i in range(covered)])
    first = _snapshot(root).read_bytes()
    with JsonlStore(root) as store:
        store.add([make_record(SCOPE, "one more")])
    assert _snapshot(root).read_bytes() == first  # 1 line past 64: replaying it is cheaper
    with JsonlStore(root) as store:
        store.add([make_record(SCOPE, "two more")])
    assert _snapshot(root).read_bytes() != first
    assert len(_state(root)) == covered + 2


def _two_scopes(root: Path) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
    mine = [make_record(SCOPE, f"mine {i}") for i in range(4)]
    others = [make_record(OTHER, f"other {i}") for i in range(3)]
    _made(root, mine + others)
    return mine, others


def _flip(offset: int) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        data = bytearray(_snapshot(root).read_bytes())
        data[offset % len(data)] ^= 0x40
        _snapshot(root).write_bytes(bytes(data))

    return damage


def _truncate(root: Path) -> None:
    data = _snapshot(root).read_bytes()
    _snapshot(root).write_bytes(data[: len(data) // 2])


def _other_scopes_file(root: Path) -> None:
    shutil.copyfile(_snapshot(root, OTHER), _snapshot(root))


def _rewrite(change: Callable[[Rows, Rows], Rows]) -> Callable[[Path], None]:
    """A crafted snapshot with a valid checksum and digest: ``change(mine, other's)`` are its rows."""

    def damage(root: Path) -> None:
        rows, mark = read_snapshot(_snapshot(root), SCOPE, DIM)
        others, _ = read_snapshot(_snapshot(root, OTHER), OTHER, DIM)
        write_snapshot(_snapshot(root), SCOPE, change(rows, others), mark, durable=False)

    return damage


def _with_encoded(rows: Rows, encoded: list[bytes]) -> Rows:
    return Rows(
        encoded, rows.ids, rows.created, rows.expires, rows.roles, rows.kinds, rows.vectors, rows.has_vector
    )


def _stale(root: Path) -> None:
    """The snapshot of before a compaction that erased a record, put back after it."""
    old = _snapshot(root).read_bytes()
    with JsonlStore(root) as store:
        [first] = store.list(SCOPE, limit=1)
        vector = store.vectors(SCOPE, [first.id])[first.id]
        store.delete(SCOPE, [first.id])
        store.compact()
        store.add([first], vector[None])  # the same again, so that the expected state is unchanged
    _snapshot(root).write_bytes(old)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(_flip(20), id="flipped-header"),
        pytest.param(_flip(-5), id="flipped-blob"),
        pytest.param(_flip(-1000), id="flipped-vectors"),
        pytest.param(_truncate, id="truncated"),
        pytest.param(lambda root: _snapshot(root).write_bytes(b""), id="empty"),
        pytest.param(_other_scopes_file, id="another-scopes-file"),
        pytest.param(_rewrite(lambda mine, others: others), id="crafted-records-of-another-scope"),
        pytest.param(
            _rewrite(
                lambda mine, _: _with_encoded(mine, [mine.encoded[1], mine.encoded[0], *mine.encoded[2:]])
            ),
            id="crafted-ids-not-the-records",
        ),
        pytest.param(
            _rewrite(
                lambda mine, _: _with_encoded(
                    mine,
                    [
                        mine.encoded[0][:-1] + b',"scope":' + OTHER.model_dump_json().encode() + b"}",
                        *mine.encoded[1:],
                    ],
                )
            ),
            id="crafted-second-scope-key",
        ),
        pytest.param(
            _rewrite(
                lambda mine, _: Rows(
                    [mine.encoded[0], *mine.encoded[:-1]],
                    np.concatenate([mine.ids[:1], mine.ids[:-1]]),
                    mine.created,
                    mine.expires,
                    mine.roles,
                    mine.kinds,
                    mine.vectors,
                    mine.has_vector,
                )
            ),
            id="crafted-repeated-id",
        ),
        pytest.param(_stale, id="stale-after-compaction"),
    ],
)
def test_an_unusable_snapshot_is_ignored_removed_and_the_log_replayed(
    tmp_path: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    _two_scopes(root)
    before = _state(root)
    damage(root)
    with JsonlStore(root) as store:
        assert not _snapshot(root).exists()
        assert store.count(SCOPE) == 4
    assert "ignoring" in caplog.text
    assert _state(root) == before


def test_a_snapshot_without_its_log_is_ignored(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _two_scopes(root)
    rows, mark = read_snapshot(_snapshot(root), SCOPE, DIM)
    _log(root).unlink()  # the log is the source of truth: without it, a snapshot proves nothing
    write_snapshot(_snapshot(root), SCOPE, rows, replace(mark, offset=0), durable=False)
    with JsonlStore(root) as store:
        assert store.count(SCOPE) == 0
        assert store.count(OTHER) == 3


# -- crashes while snapshots and logs are rewritten ----------------------------------------------

_FILE_STEPS = ("write", "fsync", "replace", "rename", "unlink", "rmdir", "ftruncate")


def _die_at(step: int) -> None:
    """Make this process exit at its ``step``-th file-system change from now."""
    calls = 0

    def hook(name: str) -> None:
        real = getattr(os, name)

        def counted(*args: object, **kwargs: object) -> object:
            nonlocal calls
            if calls == step:
                os._exit(CRASHED)
            calls += 1
            return real(*args, **kwargs)

        setattr(os, name, counted)

    for name in _FILE_STEPS:
        hook(name)


@pytest.mark.parametrize("operation", ["close", "purge"])  # purge() is compact()
def test_a_crash_at_any_step_of_snapshotting_loses_nothing_and_resurrects_nothing(
    tmp_path: Path, operation: str
) -> None:
    """The process dies at each file-system step (write, fsync, rename, unlink...) of a close or
    a purge in turn; the store then holds exactly the acknowledged writes, and a purge that
    finished left no deleted byte. (A process crash: the pages it wrote survive it.)"""
    base = tmp_path / "base"
    mine, _ = _two_scopes(base)
    leaving = [make_record(Scope(tenant="t", user_id="leaving"), "LEAVING-SECRET")]
    _made(base, leaving, seed=5)
    replaced = mine[1].model_copy(
        update={"message": mine[1].message.model_copy(update={"content": "SECOND"})}
    )

    added = make_record(OTHER, "added")

    def acknowledged_writes(store: JsonlStore) -> None:
        store.delete(SCOPE, [mine[0].id])
        store.add([replaced, added], random_vectors(2, seed=7))
        store.delete_where(leaving[0].scope, {})

    expected_root = tmp_path / "expected"
    shutil.copytree(base, expected_root)
    with JsonlStore(expected_root) as store:
        acknowledged_writes(store)
    expected = _state(expected_root)
    gone = {str(mine[0].id), str(leaving[0].id)}
    assert gone.isdisjoint(key[1] for key in expected)

    for step in range(200):
        root = tmp_path / f"crash-{step}"
        shutil.copytree(base, root)

        def run(root: Path = root, step: int = step) -> None:
            store = JsonlStore(root)
            acknowledged_writes(store)
            _die_at(step)
            if operation == "purge":
                store.purge()
            store.close()

        code = _in_child(run)
        assert code in (0, CRASHED), code
        assert _state(root) == expected, step
        assert _state(root) == expected, step  # again, from what the recovering close wrote
        if code == 0:
            if operation == "purge":
                assert b"LEAVING-SECRET" not in b"".join(
                    p.read_bytes() for p in root.rglob("*") if p.is_file()
                )
            assert step > 0
            return
    pytest.fail("the operation never finished")


def test_a_failed_snapshot_at_close_still_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    store = JsonlStore(root)
    store.add([make_record(SCOPE, "kept")])
    monkeypatch.setattr(jsonl_snapshot, "write_snapshot", full_disk)
    store.close()
    assert "writing the snapshot" in caplog.text
    monkeypatch.undo()
    with JsonlStore(root) as reopened:
        assert [r.message.content for r in reopened.list(SCOPE)] == ["kept"]


def test_the_keyword_index_of_loaded_scopes_is_built_in_the_background(tmp_path: Path) -> None:
    """Snapshots carry no keyword index: the store builds it after opening, not the first recall."""
    texts = ["kyoto trip in june", "peanut allergy at dinner", "marathon training plan"]
    with JsonlStore(tmp_path) as store:
        for number, scope in enumerate((SCOPE, OTHER)):
            records = [make_record(scope, f"{texts[i % 3]} {number}-{i}") for i in range(20)]
            store.add(records, random_vectors(len(records)))
        before = [hit.record.id for hit in store.search(Scope(tenant="t"), keywords="kyoto june", limit=5)]
    with JsonlStore(tmp_path) as store:
        index = store._index
        for _ in range(500):
            with store._lock:
                if not index.build_keyword_index(0):
                    break
            time.sleep(0.01)
        assert all(partition.has_postings for partition in index._partitions.values())
        after = [hit.record.id for hit in store.search(Scope(tenant="t"), keywords="kyoto june", limit=5)]
    assert after == before and len(after) == 5


def test_a_keyword_search_before_the_background_build_builds_what_it_needs(tmp_path: Path) -> None:
    with JsonlStore(tmp_path) as store:
        records = [make_record(SCOPE, f"note {i} about kyoto") for i in range(20)]
        store.add(records, random_vectors(len(records)))
    with JsonlStore(tmp_path) as store:
        with store._lock:  # holds the background build off until this search is done
            hits = store.search(SCOPE, keywords="kyoto", limit=3)
        assert len(hits) == 3


def test_a_store_without_vectors_reopens_from_its_snapshot(
    tmp_path: Path, replay_starts: dict[str, int]
) -> None:
    with JsonlStore(tmp_path) as store:
        store.add([make_record(SCOPE, f"note {i}") for i in range(20)])
    with JsonlStore(tmp_path) as store:
        assert store.count(SCOPE) == 20
    assert replay_starts[SCOPE.digest()] > 0  # the log was read from past the snapshot only
    assert _snapshot(tmp_path).exists()


def test_a_record_a_crafted_snapshot_gives_another_scope_is_never_returned(tmp_path: Path) -> None:
    """A snapshot with a valid checksum whose record JSON names another scope (the key escaped, so
    no byte check sees it) fails loudly when read; it never comes back as the other scope's."""
    with JsonlStore(tmp_path) as store:
        records = [make_record(SCOPE, f"mine {i}") for i in range(20)]
        store.add(records, random_vectors(20))
    path = _snapshot(tmp_path)
    rows, mark = read_snapshot(path, SCOPE, DIM)
    forged = b',"\\u0073cope":' + OTHER.model_dump_json().encode() + b"}"
    encoded = [bytes(data) for data in rows.encoded]
    encoded[0] = encoded[0][:-1] + forged
    write_snapshot(path, SCOPE, replace(rows, encoded=encoded), mark, durable=True)
    first = next(r for r in records if r.id.bytes == bytes(rows.ids[0]))
    with JsonlStore(tmp_path) as store:
        with pytest.raises(StoreCorruptedError):
            store.get(SCOPE, [first.id])
        assert store.list(OTHER) == []
