"""Issue 20 (isolation and erasure where deployments live), the Chroma parts, each reproduced here."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import numpy as np
import pytest
from chroma_server import ChromaServer
from memcore_chroma import ChromaHttpStore, ChromaStore, erasure, urls
from memcore_chroma.encoding import SCOPE_KEY, entry_id
from memcore_chroma.opening import META_SCOPE_KEYS
from memcore_chroma.store import ChromaStoreBase
from test_erasure import _spare_bytes

import memcore
from memcore.errors import InvalidInputError, InvalidRecordError, StoreError, StoreFullError
from memcore.filters import MAX_FILTER_TERMS, evaluate, parse_filter
from memcore.records import MAX_METADATA_KEYS, MAX_METADATA_LIST_ITEMS, MemoryRecord, Message, MetadataValue
from memcore.scope import Scope
from memcore.testing.helpers import make_record, random_vectors
from memcore.validation import MAX_RECORD_BYTES

OWNER = Scope(tenant="t", user_id="u")
LEVELS = [
    OWNER,
    OWNER.model_copy(update={"agent_id": "a"}),
    OWNER.model_copy(update={"session_id": "s"}),
    OWNER.model_copy(update={"agent_id": "a", "session_id": "s"}),
]


# -- exact scopes ----------------------------------------------------------------------------------


def test_a_collection_written_before_scope_keys_is_backfilled_at_open(
    open_store: Callable[[], ChromaStoreBase],
) -> None:
    records = [make_record(level, f"level {i}") for i, level in enumerate(LEVELS)]
    with open_store() as store:
        store.add(records, random_vectors(len(records)))

        def as_before(collection: object) -> None:  # what an older memcore-chroma left
            ids = [entry_id(r) for r in records]
            collection.update(ids=ids, metadatas=[{SCOPE_KEY: None}] * len(ids))  # type: ignore[attr-defined]
            meta = dict(collection.metadata or {})  # type: ignore[attr-defined]
            collection.modify(metadata={**meta, META_SCOPE_KEYS: False})  # type: ignore[attr-defined]

        store._call("making the collection old", as_before)
        assert store.list(OWNER.exact()) == [], "the key is gone: an exact scope sees nothing"
    with open_store() as reopened:
        for i, level in enumerate(LEVELS):
            assert [r.id for r in reopened.list(level.exact())] == [records[i].id]
        assert reopened.count(OWNER) == 4


def test_replacing_a_record_drops_the_metadata_keys_it_no_longer_has(
    open_store: Callable[[], ChromaStoreBase],
) -> None:
    # Chroma's upsert merges an entry's metadata: the old m.a stayed, and filters matched it.
    record = make_record(OWNER, "v1", metadata={"a": 1, "tags": ["x"]})
    with open_store() as store:
        store.add([record], random_vectors(1))
        store.add([record.model_copy(update={"metadata": {"b": 2}})], random_vectors(1))
        assert store.count(OWNER, filter={"metadata.a": 1}) == 0
        assert store.count(OWNER, filter={"metadata.a": {"$exists": True}}) == 0
        assert store.count(OWNER, filter={"metadata.tags": "x"}) == 0
        assert store.count(OWNER, filter={"metadata.b": 2}) == 1


def test_exclusive_is_a_boolean_url_parameter(chroma_server: ChromaServer) -> None:
    with pytest.raises(InvalidInputError, match="exclusive"):
        memcore.open_store(f"{chroma_server.url}?exclusive=yes")
    with memcore.open_store(f"{chroma_server.url}?collection=excl-{uuid4().hex}&exclusive=1") as store:
        record = make_record(OWNER, "gone")
        store.add([record], random_vectors(1))
        store.delete(OWNER, [record.id])
        store.purge()  # a rebuild, not ExclusiveMaintenanceError
        assert store.count(OWNER) == 0


# -- permissions -----------------------------------------------------------------------------------


def _loose(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}: {stat.S_IMODE(path.stat().st_mode):o}"
        for path in [root, *root.rglob("*")]
        if not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) & 0o077
    ]


def test_a_loose_folder_and_everything_chroma_makes_in_it_end_up_private(tmp_path: Path) -> None:
    root = tmp_path / "db"
    root.mkdir()
    os.chmod(root, 0o755)
    records = [make_record(OWNER, f"private {i}") for i in range(1_200)]  # past Chroma's index sync
    with ChromaStore(root) as store:
        assert stat.S_IMODE(root.stat().st_mode) == 0o700, "others are kept out from the open on"
        store.add(records, random_vectors(len(records)))
        assert store.search(OWNER, vector=random_vectors(1)[0], limit=1)
        assert list(root.glob("*/header.bin")), "Chroma wrote its index files"
        store.delete(OWNER, [records[0].id])
        store.purge()
        assert _loose(root) == []
    assert _loose(root) == []
    # A folder an older memcore-chroma left loose is tightened at open, before any write.
    for path in [root, *root.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    with ChromaStore(root) as reopened:
        assert _loose(root) == []
        assert reopened.count(OWNER) == 1_199


# -- filters of the most terms ---------------------------------------------------------------------


def _largest_filters(chosen: list[int]) -> list[dict[str, Any]]:
    strings = [f"v{i}" for i in chosen]
    return [
        {"metadata.s": {"$in": strings}},
        {"metadata.s": {"$nin": strings}},
        {"$or": [{"metadata.s": s} for s in strings]},
        {"$and": [{"metadata.s": {"$ne": s}} for s in strings]},
        {"$not": {"$or": [{"metadata.n": i} for i in chosen]}},
        {"$or": [{"metadata.n": {"$gte": i, "$lt": i + 1}} for i in chosen[: MAX_FILTER_TERMS // 2]]},
    ]


def test_filters_of_the_most_terms_work_on_every_read_and_delete_path(
    open_store: Callable[[], ChromaStoreBase],
) -> None:
    # Before: "Expression tree is too large" (a StoreError) from ~990 clauses, one per string of
    # an $in, and a segfault of the engine (embedded) or of `chroma run` from a few thousand.
    count = 1_500
    records = [
        make_record(OWNER, f"r{i}", metadata={"n": i, "s": f"v{i}" if i % 2 else [f"v{i}", "x"]})
        for i in range(count)
    ]
    vectors = random_vectors(count, seed=2)
    chosen = [int(i) for i in np.random.default_rng(1).choice(count, MAX_FILTER_TERMS, replace=False)]
    with open_store() as store:
        store.add(records, vectors)
        for spec in _largest_filters(chosen):
            node = parse_filter(spec)
            expected = {r.id for r in records if evaluate(node, r)}
            assert {r.id for r in store.list(OWNER, filter=spec)} == expected
            assert {r.id for r in store.list(OWNER.exact(), filter=spec, order="desc", limit=7)} <= expected
            assert store.count(OWNER, filter=spec) == len(expected)
            hits = store.search(OWNER, vector=vectors[chosen[0]], filter=spec, limit=10)
            assert {h.record.id for h in hits} <= expected and len(hits) == min(10, len(expected))
        spec = _largest_filters(chosen)[0]
        assert store.delete_where(OWNER, spec) == MAX_FILTER_TERMS
        assert store.count(OWNER) == count - MAX_FILTER_TERMS


# -- the largest record ----------------------------------------------------------------------------


def _largest_record(scope: Scope) -> MemoryRecord:
    metadata: dict[str, MetadataValue] = {f"k{i:03d}": f"v{i}" for i in range(MAX_METADATA_KEYS - 1)}
    metadata["tags"] = [f"t{i}" for i in range(MAX_METADATA_LIST_ITEMS)]
    record = make_record(scope, "", metadata=metadata)
    room = MAX_RECORD_BYTES - len(record.model_dump_json().encode())
    return record.model_copy(update={"message": Message(role="user", content="x" * room)})


def _still_usable(store: ChromaStoreBase, wide: list[MemoryRecord]) -> None:
    assert store.get(OWNER, [r.id for r in wide]) == wide
    assert store.count(OWNER, filter={"metadata.tags": "t255", "metadata.k126": "v126"}) == len(wide)
    bystander = make_record(Scope(tenant="bystander"), "still writes")
    store.add([bystander], random_vectors(1))
    assert store.get(Scope(tenant="bystander"), [bystander.id]) == [bystander]


def test_the_largest_records_do_not_poison_the_collection(open_store: Callable[[], ChromaStoreBase]) -> None:
    # Before the core limit, one record of 3,000 keys (6,000 flat keys: Chroma fails from ~5,450
    # in one entry) made every later write of every tenant fail, and reads after a reopen.
    wide = [_largest_record(OWNER) for _ in range(3)]
    assert len(wide[0].model_dump_json().encode()) == MAX_RECORD_BYTES
    with open_store() as store:
        store.add(wide, random_vectors(len(wide)))
        _still_usable(store, wide)
        with pytest.raises(InvalidRecordError):
            store.add([make_record(OWNER, "too wide", metadata={f"k{i}": i for i in range(129)})])
        _still_usable(store, wide)
    with open_store() as reopened:
        _still_usable(reopened, wide)


def test_the_largest_records_survive_a_server_restart(tmp_path: Path) -> None:
    wide = [_largest_record(OWNER) for _ in range(3)]
    with ChromaServer(tmp_path / "data") as server:
        address = urls.ServerAddress("127.0.0.1", server.port, ssl=False)
        with ChromaHttpStore(address, collection="wide") as store:
            store.add(wide, random_vectors(len(wide)))
        server.stop()
        server.start()
        with ChromaHttpStore(address, collection="wide") as store:
            _still_usable(store, wide)


# -- a full disk -----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs root, or a user allowed to mount); skipped if none can be made."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a small filesystem to fill: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        _unmount(folder)


def _unmount(folder: Path) -> None:
    """Unmount ``folder``. chromadb's engine can still hold a file there for a moment after the
    store closed (``target is busy``): asked again for up to 5 s, then detached lazily (the kernel
    unmounts it once the last file is closed), so a busy moment never fails the teardown nor leaves
    the mount behind for later runs."""
    deadline = time.monotonic() + 5
    while subprocess.run(["umount", str(folder)], capture_output=True).returncode:
        if time.monotonic() > deadline:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)
            return
        time.sleep(0.1)


def test_on_a_full_disk_a_batch_that_raised_is_not_stored_and_delete_returns(small_disk: Path) -> None:
    # Before: the batch that raised was in Chroma's log, applied at the next open (stored after
    # all), and every later write raised too until then.
    scope, acknowledged, failed = Scope(tenant="full"), [], []
    with ChromaStore(small_disk / "db") as store:
        for batch in range(100):
            records = [make_record(scope, f"b{batch}-{i}", kind=f"b{batch}") for i in range(200)]
            try:
                store.add(records, random_vectors(200, seed=batch))
            except StoreFullError:
                failed = records
                break
            acknowledged += records
        assert failed, "the disk never filled"
        assert store.count(scope, filter={"kind": failed[0].kind}) == 0
        started = time.monotonic()
        assert store.delete(scope, [acknowledged[0].id]) == 1
        assert time.monotonic() - started < 10
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    with ChromaStore(small_disk / "db") as reopened:
        assert reopened.count(scope, filter={"kind": failed[0].kind}) == 0
        assert reopened.count(scope) == len(acknowledged) - 1
        assert reopened.search(scope, vector=random_vectors(1, seed=1)[0], limit=1)
        reopened.add([make_record(scope, "room again")], random_vectors(1))


def test_on_a_full_disk_a_large_batch_that_raised_says_how_many_of_its_records_are_stored(
    small_disk: Path,
) -> None:
    # Chroma takes a batch of 2,500 in three calls: one after the first that fails on a full disk
    # leaves the earlier calls' records stored, and the error must say how many.
    scope, stored_before = Scope(tenant="full"), 0
    with ChromaStore(small_disk / "db") as store:
        for batch in range(40):
            records = [make_record(scope, f"b{batch}-{i}", kind=f"b{batch}") for i in range(2_500)]
            try:
                store.add(records, random_vectors(2_500, seed=batch))
            except StoreFullError as error:
                said = re.search(r"the first (\d+) of the batch's 2500 records were stored", str(error))
                stored = int(said.group(1)) if said else 0
                assert store.count(scope, filter={"kind": f"b{batch}"}) == stored
                break
            stored_before += len(records)
        else:
            pytest.fail("the disk never filled")
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    with ChromaStore(small_disk / "db") as reopened:
        assert reopened.count(scope, filter={"kind": f"b{batch}"}) == stored
        assert reopened.count(scope) == stored_before + stored


# -- erasure on a server ---------------------------------------------------------------------------


def test_a_server_folder_scrubbed_after_a_rebuild_keeps_nothing_of_deleted_records(tmp_path: Path) -> None:
    victim = Scope(tenant="t", user_id="victim-0123456789@example.com")
    keeper = Scope(tenant="t", user_id="keeper")
    secrets = [make_record(victim, f"secret-{uuid4().hex}") for _ in range(1_200)]
    kept = [make_record(keeper, f"kept {i}") for i in range(1_200)]
    data = tmp_path / "data"
    with ChromaServer(data) as server:
        address = urls.ServerAddress("127.0.0.1", server.port, ssl=False)
        with ChromaHttpStore(address, collection="erase") as store:
            store.add(secrets + kept, random_vectors(2_400, seed=6))
            assert store.delete_where(victim, {}) == 1_200
            store.rebuild_exclusively()
        server.stop()
        scrubbed = subprocess.run(
            [sys.executable, "-m", "memcore_chroma.erasure", str(data)], capture_output=True, text=True
        )
        assert scrubbed.returncode == 0, scrubbed.stderr
        needles = [b"victim-0123456789", *(r.message.content.encode() for r in secrets[:50])]
        holding = [f for f in data.rglob("*") if f.is_file() and any(n in f.read_bytes() for n in needles)]
        assert holding == []
        assert _spare_bytes(data) and not any(_spare_bytes(data))
        server.start()
        with ChromaHttpStore(address, collection="erase") as store:
            assert store.count(keeper) == 1_200 and store.count(victim) == 0
            assert store.search(keeper, vector=random_vectors(1)[0], limit=1)


def test_scrubbing_refuses_a_folder_that_is_not_chromas(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a Chroma persist directory"):
        erasure.scrub_server_folder(tmp_path)
