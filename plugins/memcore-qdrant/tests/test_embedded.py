"""What the plugin adds to the embedded engine: purge, locking, shared engines, incompatible shards."""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as edge
from memcore_qdrant import IncompatibleCollectionError, QdrantMemoryStore, QdrantStore, edge_engine
from memcore_qdrant import engine as engine_module
from memcore_qdrant import payload as fields
from memcore_qdrant.meta import write_space
from qdrant_client import QdrantClient, models

from memcore.errors import StoreForkedError, StoreLockedError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import VectorSpace
from memcore.testing.helpers import make_record

DIM = 8


def _record(scope: Scope, content: str) -> MemoryRecord:
    return MemoryRecord(scope=scope, message=Message(role="user", content=content))


def _bytes_under(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


def test_purge_erases_deleted_content_and_vectors_from_disk(tmp_path: Path) -> None:
    root = tmp_path / "store"
    scope = Scope(tenant="acme", user_id="alice")
    secret = f"SECRET-{uuid.uuid4().hex}"
    kept = f"KEPT-{uuid.uuid4().hex}"
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((2, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    doomed, survivor = _record(scope, secret), _record(scope, kept)
    with QdrantStore.from_url(f"qdrant://{root}") as store:
        store.add([doomed, survivor], vectors)
        store.delete(scope, [doomed.id])
        on_disk = _bytes_under(root)
        assert secret.encode() in on_disk  # deleted, but still in the engine's files
        assert vectors[0].tobytes() in on_disk
        store.purge()
        on_disk = _bytes_under(root)
        assert secret.encode() not in on_disk
        assert secret.casefold().encode() not in on_disk
        assert vectors[0].tobytes() not in on_disk
        assert kept.encode() in on_disk
        assert [h.record.id for h in store.search(scope, vector=vectors[1], limit=5)] == [survivor.id]
    with QdrantStore.from_url(f"qdrant://{root}") as reopened:
        assert reopened.get(scope, [doomed.id, survivor.id]) == [survivor]
        assert reopened.dimension == DIM


def test_a_second_process_gets_store_locked_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    probe = (
        "import sys\n"
        "from memcore.errors import StoreForkedError, StoreLockedError\n"
        "from memcore_qdrant import QdrantStore\n"
        "try:\n"
        f"    QdrantStore.from_url({f'qdrant://{root}'!r})\n"
        "except StoreLockedError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    with QdrantStore.from_url(f"qdrant://{root}"):
        held = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert held.returncode == 3, held.stderr
    assert "open in another process" in held.stdout
    released = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert released.returncode == 0, released.stdout + released.stderr


def test_store_objects_of_one_process_share_the_engine(tmp_path: Path) -> None:
    url = f"qdrant://{tmp_path / 'store'}"
    scope = Scope(tenant="acme")
    record = _record(scope, "shared")
    first, second = QdrantStore.from_url(url), QdrantStore.from_url(url)
    try:
        first.add([record])
        assert second.get(scope, [record.id]) == [record]
        first.close()
        assert second.count(scope) == 1
    finally:
        second.close()
    local = QdrantStore.open_local_client(tmp_path / "other")
    try:
        with pytest.raises(StoreLockedError, match="qdrant-client-local"):
            QdrantStore.from_url(f"qdrant://{tmp_path / 'other'}")
    finally:
        local.close()


def test_a_shard_with_another_distance_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    config = edge.EdgeConfig(
        vectors={"dense": edge.EdgeVectorParams(size=DIM, distance=edge.Distance.Euclid)}
    )
    edge.EdgeShard.create(str(root / "shard"), config).close()
    with pytest.raises(IncompatibleCollectionError, match="cosine"):
        QdrantStore.from_url(f"qdrant://{root}")
    QdrantStore.from_url(f"qdrant://{root}-elsewhere").close()  # the failed open left no lock behind


def test_a_shard_of_another_dimension_than_its_binding_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with QdrantStore.from_url(f"qdrant://{root}") as store:
        store.add([_record(Scope(tenant="acme"), "x")], np.ones((1, DIM), dtype=np.float32))
    write_space(root, VectorSpace("other-model", DIM * 2))
    with pytest.raises(IncompatibleCollectionError, match="dimensions"):
        QdrantStore.from_url(f"qdrant://{root}")


def test_a_collection_with_another_distance_is_refused_by_the_client_engine(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path / "local" / "client"))
    vectors = {"dense": models.VectorParams(size=DIM, distance=models.Distance.EUCLID)}
    client.create_collection("memcore", vectors_config=vectors)
    client.close()
    with pytest.raises(IncompatibleCollectionError, match="cosine"):
        QdrantStore.open_local_client(tmp_path / "local")


def _in_forked_child(url: str, inherited: list[QdrantStore], results: Any) -> None:
    """What a forked child meets: its own open refused, the parent's store objects refusing calls."""
    outcome: list[str] = []
    try:
        QdrantStore.from_url(url).close()
        outcome.append("reopened")
    except StoreLockedError:
        outcome.append("reopen: StoreLockedError")
    for store in inherited:
        try:
            store.count(Scope(tenant="acme"))
            outcome.append("inherited: usable")
        except StoreForkedError:
            outcome.append("inherited: StoreForkedError")
        store.close()  # must leave the parent's engine (and the memory store's folder) alone
    results.put(outcome)


def _files(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_forked_child_is_refused_typed_and_leaves_the_parent_alone(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    url = f"qdrant://{tmp_path / 'store'}"
    scope = Scope(tenant="acme")
    with QdrantStore.from_url(url) as store, QdrantMemoryStore.from_url("qdrant+memory://") as memory:
        store.add([_record(scope, f"parent {i}") for i in range(20)])
        store.delete(scope, [store.list(scope, limit=1)[0].id])
        memory.add([_record(scope, "parent")])
        before = _files(tmp_path / "store")
        results = context.Queue()
        child = context.Process(target=_in_forked_child, args=(url, [store, memory], results))
        child.start()
        try:
            outcome = results.get(timeout=30)
            child.join(timeout=30)
        finally:
            if child.is_alive():
                child.kill()
        assert outcome == ["reopen: StoreLockedError", *["inherited: StoreForkedError"] * 2]
        assert child.exitcode == 0
        assert _files(tmp_path / "store") == before, "the child wrote into the parent's shard"
        store.add([_record(scope, "parent, after the child")])
        assert store.count(scope) == 20
        assert memory.count(scope) == 1
        assert Path(memory.location).is_dir()
    with QdrantStore.from_url(url) as reopened:
        assert reopened.count(scope) == 20


_DROP_IN_CHILD = """
import gc, os, sys
from memcore_qdrant import QdrantStore
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

scope = Scope(tenant="acme")
store = QdrantStore.from_url(sys.argv[1])
records = [MemoryRecord(scope=scope, message=Message(role="user", content=f"r{i}")) for i in range(20)]
store.add(records)
store.delete(scope, [records[0].id])
sys.stdout.write("ready\\n")
sys.stdout.flush()
sys.stdin.readline()  # the test takes its snapshot of the files now
child = os.fork()
if child == 0:  # a worker that drops what it inherited and exits normally, finalisers and all
    store.close()
    del store
    gc.collect()
    sys.exit(0)
_, status = os.waitpid(child, 0)
sys.stdout.write(f"child exited {status}\\n")
sys.stdout.flush()
sys.stdin.readline()  # the second snapshot
store.add([MemoryRecord(scope=scope, message=Message(role="user", content="after"))])
store.close()
"""


def test_a_forked_child_dropping_an_inherited_store_never_writes_the_parents_shard(tmp_path: Path) -> None:
    """Dropping a Qdrant Edge shard flushes it: a child used to rewrite the parent's segment files."""
    root = tmp_path / "store"
    parent = subprocess.Popen(
        [sys.executable, "-c", _DROP_IN_CHILD, f"qdrant://{root}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stdin is not None
        assert parent.stdout.readline() == "ready\n"
        before = _files(root)
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "child exited 0\n"
        changed = sorted(name for name, seen in _files(root).items() if before.get(name) != seen)
        assert changed == []
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.wait(timeout=60) == 0
    finally:
        parent.kill()
    with QdrantStore.from_url(f"qdrant://{root}") as reopened:
        assert reopened.count(Scope(tenant="acme")) == 20


def test_the_memory_store_lives_in_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not in /dev/shm: a full /dev/shm (64 MB in a container) kills the process with SIGBUS."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with QdrantMemoryStore.from_url("qdrant+memory://") as store:
        root = Path(store.location)
        assert root.parent == tmp_path
        store.add([_record(Scope(tenant="acme"), "x")])
    assert not root.exists()


def test_purge_copies_the_shard_page_by_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records, dim, page = 2_000, 128, 100
    scope = Scope(tenant="acme")
    rng = np.random.default_rng(3)
    with QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}") as store:
        batch = [_record(scope, f"r{i}") for i in range(records)]
        store.add(batch, rng.standard_normal((records, dim)).astype(np.float32))
        store.delete(scope, [batch[0].id])
        monkeypatch.setattr(engine_module, "SCROLL_PAGE", page)
        tracemalloc.start()
        try:
            store.purge()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # Every vector as a list of Python floats would take records * dim * 32 bytes (8 MB);
        # one page of them takes a twentieth of that.
        assert peak < records * dim * 32 / 5, f"purge held {peak / 2**20:.1f} MiB of Python objects"
        assert store.count(scope) == records - 1
        assert store.dimension == dim


def test_a_shard_whose_creation_stopped_before_its_indexes_gets_them(tmp_path: Path) -> None:
    """A crash between writing the shard's config and creating its payload indexes."""
    root = tmp_path / "store"
    config = edge.EdgeConfig(sparse_vectors={edge_engine.PLACEHOLDER: edge.EdgeSparseVectorParams()})
    edge.EdgeShard.create(str(root / "shard"), config).close()
    scope = Scope(tenant="acme")
    with QdrantStore.from_url(f"qdrant://{root}") as store:
        store.add([_record(scope, f"r{i}") for i in range(3)])
        assert len(store.list(scope, limit=2)) == 2  # ordered reads need the created_at index
        assert len(store.search(scope, text="r1")) == 1
    shard = edge.EdgeShard.load(str(root / "shard"))
    try:
        indexed = set(shard.info().payload_schema)
    finally:
        shard.close()
    assert indexed >= {*fields.KEYWORD_FIELDS, fields.CREATED_AT}


def test_threads_opening_and_closing_one_path_never_see_it_locked(tmp_path: Path) -> None:
    """The last user closes the engine outside the registry's lock; openers wait for that close."""
    url = f"qdrant://{tmp_path / 'store'}"
    errors: list[BaseException] = []

    def churn() -> None:
        for _ in range(10):
            try:
                with QdrantStore.from_url(url) as store:
                    store.count(Scope(tenant="acme"))
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []


def test_a_metadata_key_is_indexed_the_first_time_a_filter_reads_it(tmp_path: Path) -> None:
    engine = engine_module
    with QdrantStore.from_url(f"qdrant://{tmp_path}/store") as store:
        scope = Scope(tenant="t")
        store.add([make_record(scope, f"r{i}", metadata={"n": i, "tag": "x"}) for i in range(30)])
        shard = store._engine._shard  # type: ignore[attr-defined]
        assert "m_int.n" not in shard.info().payload_schema
        assert store.count(scope, filter={"metadata.n": {"$lt": 10}}) == 10
        assert store.count(scope, filter={"metadata.tag": "x"}) == 30
        schema = set(shard.info().payload_schema)
        assert {"m_int.n", "m_float.n", "m_str.tag", "m_list.tag"} <= schema
        cap = engine.MAX_METADATA_INDEXES
        for i in range(cap):
            store.count(scope, filter={f"metadata.k{i}": i})
        assert len(set(shard.info().payload_schema) - engine.BUILT_IN_INDEXES) == cap
        assert store.count(scope, filter={"metadata.n": {"$gte": 25}}) == 5, (
            "past the cap, filters still work"
        )


def _loose(folder: Path) -> list[str]:
    return [
        f"{path} {stat.S_IMODE(path.stat().st_mode):o}"
        for path in [folder, *folder.rglob("*")]
        if stat.S_IMODE(path.stat().st_mode) & 0o077
    ]


def test_a_folder_made_beforehand_is_private_from_the_open_and_every_file_once_closed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    os.chmod(root, 0o755)
    (root / "notes.txt").write_text("left here before")
    os.chmod(root / "notes.txt", 0o644)
    scope = Scope(tenant="acme")
    with QdrantStore.from_url(f"qdrant://{root}") as store:
        assert stat.S_IMODE(root.stat().st_mode) == 0o700  # what keeps others out of new files
        assert stat.S_IMODE((root / "notes.txt").stat().st_mode) == 0o600
        store.add([_record(scope, f"r{i}") for i in range(5)], np.eye(5, DIM, dtype=np.float32))
        store.delete(scope, [store.list(scope, limit=1)[0].id])
        store.purge()  # a new shard, new files
    assert _loose(root) == []


_HOLD_A_MEMORY_STORE = """
import sys
from memcore_qdrant import QdrantMemoryStore
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

store = QdrantMemoryStore.from_url("qdrant+memory://")
scope = Scope(tenant="acme")
store.add([MemoryRecord(scope=scope, message=Message(role="user", content="SECRET-" + sys.argv[1]))])
print(store.location, flush=True)
sys.stdin.readline()  # alive until killed
"""


def _holding_a_memory_store(tmp_path: Path, tag: str) -> tuple[subprocess.Popen[str], Path]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_A_MEMORY_STORE, tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert holder.stdout is not None
    return holder, Path(holder.stdout.readline().strip())


def test_a_killed_memory_stores_folder_is_swept_by_the_next_open_and_a_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed, dead_folder = _holding_a_memory_store(tmp_path, "killed")
    alive, live_folder = _holding_a_memory_store(tmp_path, "alive")
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert b"SECRET-killed" in _bytes_under(dead_folder)  # what kill -9 leaves behind
        legacy = tmp_path / "memcore-qdrant-legacy"  # no owner file: left alone
        legacy.mkdir()
        with QdrantMemoryStore.from_url("qdrant+memory://") as store:
            assert Path(store.location).parent == tmp_path
            assert not dead_folder.exists()
            assert live_folder.is_dir() and b"SECRET-alive" in _bytes_under(live_folder)
            assert legacy.is_dir()
    finally:
        for holder in (killed, alive):
            holder.kill()
            holder.wait(timeout=30)
