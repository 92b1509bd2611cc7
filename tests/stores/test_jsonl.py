"""What the jsonl store promises beyond the conformance suite: files, crashes, locks, erasure."""

from __future__ import annotations

import base64
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

from memcore.errors import StoreCorruptedError, StoreError, StoreLockedError
from memcore.scope import Scope
from memcore.stores import jsonl, jsonl_log
from memcore.stores.jsonl import AUTO_COMPACT_DEAD_LINES, JsonlStore
from memcore.testing.helpers import make_record, random_vectors


@pytest.fixture(params=["default", "snapshot-every-close"])
def both_layouts(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run a test twice: as the store is configured (small stores have no snapshot), and with a
    snapshot of every scope at each close and compaction, which a torn, cut or rewritten log must
    invalidate (the log is the source of truth). Whether the second one is running."""
    if request.param == "snapshot-every-close":
        monkeypatch.setattr(jsonl, "SNAPSHOT_MIN_LINES", 1)
    return bool(request.param == "snapshot-every-close")


both = pytest.mark.usefixtures("both_layouts")


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("scopes/*/entries.jsonl"))


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


@both
def test_files_are_private(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JsonlStore(root) as store:
        store.add([make_record(Scope(tenant="t"))], random_vectors(1))
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path


def test_one_folder_per_scope_named_by_digest(tmp_path: Path) -> None:
    root = tmp_path / "store"
    scopes = [Scope(tenant="t", user_id="u1"), Scope(tenant="t", user_id="u2")]
    with JsonlStore(root) as store:
        for scope in scopes:
            store.add([make_record(scope)])
    assert {p.name for p in (root / "scopes").iterdir()} == {s.digest() for s in scopes}
    meta = json.loads((root / "scopes" / scopes[0].digest() / "meta.json").read_text())
    assert meta["scope"] == scopes[0].model_dump()


def test_vectors_are_stored_compactly(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JsonlStore(root) as store:
        store.add([make_record(Scope(tenant="t"), "x")], random_vectors(1, dim=384))
    [log] = _entries(root)
    line = log.read_text()
    # The vector is base64 of its float32 bytes, not a list of decimals. (Looking for "e-0" in
    # the whole line failed whenever the random record id held "e-0", as in "...ee-07aa-...".)
    vector = json.loads(line)["vector"]
    assert isinstance(vector, str) and len(base64.b64decode(vector, validate=True)) == 384 * 4
    assert len(line) < 384 * 4 * 4 // 3 + 700


def _store_with_records(root: Path, count: int = 3) -> list[str]:
    scope = Scope(tenant="t")
    with JsonlStore(root) as store:
        for i in range(count):
            store.add([make_record(scope, f"acknowledged {i}")], random_vectors(1, seed=i))
    return [f"acknowledged {i}" for i in range(count)]


def _contents(root: Path) -> list[str]:
    with JsonlStore(root) as store:
        return [r.message.content for r in store.list(Scope(tenant="t"))]


@both
def test_torn_last_record_at_every_offset_loses_only_that_record(tmp_path: Path) -> None:
    root = tmp_path / "store"
    contents = _store_with_records(root)
    [log] = _entries(root)
    intact = log.read_bytes()
    last_line_start = intact.rstrip(b"\n").rfind(b"\n") + 1
    for offset in range(last_line_start, len(intact)):
        log.write_bytes(intact[:offset])
        with JsonlStore(root) as store:
            assert [r.message.content for r in store.list(Scope(tenant="t"))] == contents[:-1], offset
            assert store.skipped_lines() == (0 if offset == last_line_start else 1)
    log.write_bytes(intact)
    assert _contents(root) == contents


@both
@pytest.mark.parametrize(
    "tail",
    [b"garbage", b"garbage\n", b'{"op":"put"', b"\x00\x00\x00\n", b'{"op":"del","seq":99}\n', b"\n\n"],
    ids=["text", "text-newline", "json-start", "nul-bytes", "json-without-crc", "blank-lines"],
)
def test_garbage_tail_is_skipped_counted_and_writes_continue(tmp_path: Path, tail: bytes) -> None:
    root = tmp_path / "store"
    contents = _store_with_records(root)
    [log] = _entries(root)
    with log.open("ab") as handle:
        handle.write(tail)
    with JsonlStore(root) as store:
        assert store.skipped_lines() == tail.count(b"\n") + (not tail.endswith(b"\n"))
        store.add([make_record(Scope(tenant="t"), "after the crash")])
    assert _contents(root) == [*contents, "after the crash"]


@both
def test_an_incomplete_batch_is_invisible(tmp_path: Path) -> None:
    root = tmp_path / "store"
    scope = Scope(tenant="t")
    with JsonlStore(root) as store:
        store.add([make_record(scope, "single")])
        store.add([make_record(scope, f"batch {i}") for i in range(3)])
    [log] = _entries(root)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]))
    with JsonlStore(root) as store:
        assert [r.message.content for r in store.list(scope)] == ["single"]
        assert store.skipped_lines() == 2


def test_corrupt_root_meta_is_a_typed_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_records(root, 1)
    (root / "meta.json").write_text("{not json")
    with pytest.raises(StoreCorruptedError):
        JsonlStore(root)
    (root / "meta.json").write_text(json.dumps({"format": "other", "schema_version": 1}))
    with pytest.raises(StoreCorruptedError):
        JsonlStore(root)


def test_corrupt_scope_meta_is_a_typed_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_records(root, 1)
    [log] = _entries(root)
    (log.parent / "meta.json").write_text("[]")
    with pytest.raises(StoreCorruptedError):
        JsonlStore(root)


def test_second_opener_in_this_process_is_refused(tmp_path: Path) -> None:
    with JsonlStore(tmp_path / "store"), pytest.raises(StoreLockedError):
        JsonlStore(tmp_path / "store")
    JsonlStore(tmp_path / "store").close()


_HOLD_OPEN = textwrap.dedent(
    """
    import sys, time
    from memcore.stores.jsonl import JsonlStore
    store = JsonlStore(sys.argv[1])
    print("open", flush=True)
    time.sleep(60)
    """
)


def test_second_process_is_refused_and_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    root = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_OPEN, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(StoreLockedError, match=str(holder.pid)):
            JsonlStore(root)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    JsonlStore(root).close()


_CRASHING_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from memcore.records import MemoryRecord, Message
    from memcore.scope import Scope
    from memcore.stores.jsonl import JsonlStore
    store = JsonlStore(sys.argv[1])
    rng = np.random.default_rng(int(sys.argv[2]))
    batch = 0
    while True:
        records = [
            MemoryRecord(
                scope=Scope(tenant="t", user_id=f"u{i % 3}"),
                message=Message(role="user", content=f"{sys.argv[2]}-{batch}-{i}"),
            )
            for i in range(5)
        ]
        store.add(records, rng.standard_normal((5, 16)))
        print(" ".join(str(r.id) for r in records), flush=True)
        batch += 1
    """
)


@both
def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acknowledged: set[str] = set()
    for round_number in range(4):
        writer = subprocess.Popen(
            [sys.executable, "-c", _CRASHING_WRITER, str(root), str(round_number)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        for _ in range(5 + 7 * round_number):
            acknowledged.update(writer.stdout.readline().split())
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        acknowledged.update(writer.stdout.read().split())
        with JsonlStore(root) as store:
            stored = store.list(Scope(tenant="t"))
            stored_ids = [str(r.id) for r in stored]
            assert acknowledged <= set(stored_ids)
            assert len(stored_ids) == len(set(stored_ids))
            # A batch is atomic per scope: each (batch, user) part is whole or absent.
            parts: dict[tuple[str, str | None], int] = {}
            for record in stored:
                key = (record.message.content.rsplit("-", 1)[0], record.scope.user_id)
                parts[key] = parts.get(key, 0) + 1
            full = {"u0": 2, "u1": 2, "u2": 1}
            assert all(count == full[str(user)] for (_, user), count in parts.items())


def test_purge_leaves_no_deleted_content_or_vector_on_disk(tmp_path: Path, both_layouts: bool) -> None:
    root = tmp_path / "store"
    scope, gone_scope = Scope(tenant="t"), Scope(tenant="t", user_id="leaving")
    keep = make_record(scope, "keep me")
    secret = make_record(scope, "SECRET-CONTENT-1234")
    leaving = make_record(gone_scope, "ANOTHER-SECRET-5678")
    vectors = random_vectors(3, seed=42)
    with JsonlStore(root) as store:
        store.add([keep, secret], vectors[:2])
        store.add([leaving], vectors[2:])
    assert bool(list(root.glob("scopes/*/snapshot.bin"))) == both_layouts
    with JsonlStore(root) as store:
        store.delete(scope, [secret.id])
        store.delete_where(gone_scope, {})
        assert b"SECRET-CONTENT-1234" in _all_bytes(root)
        store.purge()
        assert store.list(Scope.everything()) == [keep]
    on_disk = _all_bytes(root)
    for needle in (b"SECRET-CONTENT-1234", b"ANOTHER-SECRET-5678", b"leaving"):
        assert needle not in on_disk
    for record in (secret, leaving):
        assert str(record.id).encode() not in on_disk and record.id.bytes not in on_disk
    for row in (1, 2):
        unit = (vectors[row] / np.linalg.norm(vectors[row])).astype("<f4").tobytes()
        assert base64.b64encode(unit) not in on_disk and unit not in on_disk
    assert not (root / "scopes" / gone_scope.digest()).exists()
    assert _contents(root) == ["keep me"]


def test_logs_are_compacted_automatically(tmp_path: Path) -> None:
    root = tmp_path / "store"
    scope = Scope(tenant="t")
    record = make_record(scope, "rewritten")
    with JsonlStore(root) as store:
        for _ in range(AUTO_COMPACT_DEAD_LINES + 10):
            store.add([record])
        [log] = _entries(root)
        assert len(log.read_bytes().splitlines()) < AUTO_COMPACT_DEAD_LINES
    assert _contents(root) == ["rewritten"]


def test_from_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    JsonlStore.from_url(f"jsonl://{tmp_path}/absolute").close()
    assert (tmp_path / "absolute" / "meta.json").exists()
    monkeypatch.chdir(tmp_path)
    JsonlStore.from_url("jsonl://relative/store").close()
    assert (tmp_path / "relative" / "store" / "meta.json").exists()
    assert os.stat(tmp_path / "relative" / "store").st_mode & 0o077 == 0


@both
def test_leftovers_of_an_interrupted_scope_creation_or_removal_are_cleaned(tmp_path: Path) -> None:
    root = tmp_path / "store"
    contents = _store_with_records(root)
    scopes = root / "scopes"
    half_made = scopes / ".new-0123-abcd"
    half_made.mkdir()
    (half_made / "entries.jsonl").write_text("partial")
    half_removed = scopes / ".trash-4567-abcd"
    half_removed.mkdir()
    assert _contents(root) == contents
    assert sorted(p.name for p in scopes.iterdir()) == [Scope(tenant="t").digest()]


def test_a_crash_before_a_new_scope_folder_is_renamed_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    contents = _store_with_records(root)

    def crash(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with JsonlStore(root) as store:
        monkeypatch.setattr(os, "rename", crash)
        with pytest.raises(StoreError, match="nothing was stored"):
            store.add([make_record(Scope(tenant="other"), "lost")])
        monkeypatch.undo()
        assert store.count(Scope(tenant="other")) == 0
    assert _contents(root) == contents
    assert [p.name for p in (root / "scopes").iterdir()] == [Scope(tenant="t").digest()]


def test_a_multi_scope_batch_that_fails_midway_says_what_was_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = Scope(tenant="a"), Scope(tenant="b")
    real_append = jsonl_log.append_lines

    def fail_for_second(path: Path, lines: list[bytes], *, needs_newline: bool) -> None:
        if path.parent.name == second.digest():
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(path, lines, needs_newline=needs_newline)

    with JsonlStore(tmp_path / "store") as store:
        monkeypatch.setattr(jsonl_log, "append_lines", fail_for_second)
        with pytest.raises(StoreError, match="tenant=a were stored"):
            store.add([make_record(first, "A"), make_record(second, "B")])
        assert [r.message.content for r in store.list(Scope.everything())] == ["A"]


def test_a_failed_automatic_compaction_does_not_fail_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scope = Scope(tenant="t")
    record = make_record(scope, "v1")
    with JsonlStore(tmp_path / "store") as store:
        for _ in range(AUTO_COMPACT_DEAD_LINES + 1):
            store.add([record])

        def full_disk(path: Path, data: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(jsonl_log, "write_atomically", full_disk)
        store.add(
            [record.model_copy(update={"message": record.message.model_copy(update={"content": "v2"})})]
        )
        assert "automatic compaction" in caplog.text
    monkeypatch.undo()
    assert _contents(tmp_path / "store") == ["v2"]


def test_scope_meta_without_a_scope_is_a_typed_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_records(root, 1)
    [log] = _entries(root)
    (log.parent / "meta.json").write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(StoreCorruptedError):
        JsonlStore(root)


def _rewrite_first_line(root: Path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` in the first line of the store's one log, with a valid checksum."""
    [log] = _entries(root)
    lines = log.read_bytes().splitlines(keepends=True)
    body = lines[0][: -len(b',"crc":"00000000"}\n')].replace(old, new)
    lines[0] = body + b',"crc":"%08x"}\n' % zlib.crc32(body)
    log.write_bytes(b"".join(lines))


@both
@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(b'"kind":"turn"', b'"kind":"NOT VALID"', id="invalid-record"),
        # A folder holds one scope's records: a line naming another scope (never written so).
        pytest.param(b'"tenant":"t"', b'"tenant":"other"', id="another-scope"),
    ],
)
def test_a_line_that_cannot_be_the_folders_record_is_skipped_and_counted(
    tmp_path: Path, old: bytes, new: bytes
) -> None:
    root = tmp_path / "store"
    contents = _store_with_records(root, 2)
    _rewrite_first_line(root, old, new)
    with JsonlStore(root) as store:
        assert [r.message.content for r in store.list(Scope(tenant="t"))] == contents[1:]
        assert store.count(Scope(tenant="other")) == 0
        assert store.skipped_lines() == 1


@both
def test_reopening_does_not_rewrite_unchanged_scope_files(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_records(root, 2)
    [log] = _entries(root)
    before = (log.parent / "meta.json").stat().st_mtime_ns
    JsonlStore(root).close()
    assert (log.parent / "meta.json").stat().st_mtime_ns == before


def test_an_existing_empty_root_becomes_private(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    JsonlStore(root).close()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_a_forked_child_holds_no_lock_of_its_parent(tmp_path: Path) -> None:
    """The advised post-fork reopen works: once the parent closed the store, a child that inherited
    the open object opens the folder itself (its copy of the lock descriptor was closed at fork)."""
    store = JsonlStore(tmp_path)
    store.add([make_record(Scope(tenant="t"), "before the fork")])
    ready, go = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        status = 1
        try:
            os.read(ready, 1)
            store.close()
            with JsonlStore(tmp_path) as mine:
                status = 0 if mine.count(Scope(tenant="t")) == 1 else 2
        finally:
            os._exit(status)
    store.close()
    os.write(go, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with JsonlStore(tmp_path) as again:  # and the child let go of it on exit
        assert again.count(Scope(tenant="t")) == 1
